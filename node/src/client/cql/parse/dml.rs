//! The statements on rows: SELECT, UPDATE, INSERT, DELETE and BATCH.

use super::super::ast::*;
use super::super::lex::Token;
use super::{Parsed, Parser, SyntaxError};

impl Parser {
    pub(super) fn select(&mut self) -> Parsed<Select> {
        let distinct = self.eat("distinct");
        let selection = self.selection()?;
        self.expect("from")?;
        let table = self.table()?;
        let (relations, tokens) = self.select_where()?;
        let mut group_by = Vec::new();
        if self.eat("group") {
            self.expect("by")?;
            group_by = self.names()?;
        }
        let mut order_by = Vec::new();
        if self.eat("order") {
            self.expect("by")?;
            order_by.push(self.ordered_column()?);
            while self.eat_symbol(",") {
                order_by.push(self.ordered_column()?);
            }
        }
        let per_partition_limit = match self.eat("per") {
            true => {
                self.expect("partition")?;
                self.expect("limit")?;
                Some(self.term()?)
            }
            false => None,
        };
        let limit = match self.eat("limit") {
            true => Some(self.term()?),
            false => None,
        };
        let allow_filtering = match self.eat("allow") {
            true => self.expect("filtering").map(|()| true)?,
            false => false,
        };
        Ok(Select {
            table,
            selection,
            relations,
            tokens,
            group_by,
            order_by,
            limit,
            allow_filtering,
            distinct,
            per_partition_limit,
        })
    }

    fn selection(&mut self) -> Parsed<Selection> {
        if self.eat_symbol("*") {
            return Ok(Selection::All);
        }
        let mut columns = Vec::new();
        loop {
            let name = self.name()?;
            let star = matches!(
                (self.peek(), self.tokens.get(self.at + 1)),
                (
                    Some(Token::Symbol("(")),
                    Some(Token::Symbol("*") | Token::Int(1))
                )
            );
            if name == "count" && star {
                self.at += 2;
                self.expect_symbol(")")?;
                let alias = self.alias()?;
                return match columns.is_empty() {
                    true => Ok(Selection::Count(alias)),
                    false => Err(SyntaxError("COUNT(*) mixed with columns".into())),
                };
            }
            let name = match name.as_str() {
                "writetime" | "ttl" if self.eat_symbol("(") => {
                    let column = self.name()?;
                    self.expect_symbol(")")?;
                    format!("{name}({column})")
                }
                "token" if self.eat_symbol("(") => {
                    let columns = self.names()?;
                    self.expect_symbol(")")?;
                    token_selector(&columns)
                }
                "sum" | "avg" | "min" | "max" | "count" if self.eat_symbol("(") => {
                    let column = self.name()?;
                    self.expect_symbol(")")?;
                    format!("system.{name}({column})")
                }
                _ => name,
            };
            columns.push((name, self.alias()?));
            if !self.eat_symbol(",") {
                return Ok(Selection::Columns(columns));
            }
        }
    }

    fn alias(&mut self) -> Parsed<Option<String>> {
        match self.eat("as") {
            true => self.name().map(Some),
            false => Ok(None),
        }
    }

    /// `WHERE rel AND ...`; `required` for writes.
    fn where_clause(&mut self, required: bool) -> Parsed<Vec<Relation>> {
        if !self.eat("where") {
            return match required {
                true => Err(self.wanted("WHERE")),
                false => Ok(Vec::new()),
            };
        }
        let mut relations = vec![self.relation()?];
        while self.eat("and") {
            relations.push(self.relation()?);
        }
        Ok(relations)
    }

    /// A SELECT's `WHERE`, whose relations may be on `token(...)`.
    fn select_where(&mut self) -> Parsed<(Vec<Relation>, Vec<TokenRelation>)> {
        let (mut relations, mut tokens) = (Vec::new(), Vec::new());
        if !self.eat("where") {
            return Ok((relations, tokens));
        }
        loop {
            match self.token_call() {
                true => tokens.push(self.token_relation()?),
                false => relations.push(self.relation()?),
            }
            if !self.eat("and") {
                return Ok((relations, tokens));
            }
        }
    }

    /// Whether `token(` comes next.
    fn token_call(&self) -> bool {
        matches!(
            (self.peek(), self.tokens.get(self.at + 1)),
            (Some(Token::Word(w)), Some(Token::Symbol("("))) if w == "token"
        )
    }

    /// `token(a, b) op (bigint | token(values))`.
    fn token_relation(&mut self) -> Parsed<TokenRelation> {
        self.at += 2;
        let columns = self.names()?;
        self.expect_symbol(")")?;
        let op = match self.comparison()? {
            Op::Ne => return Err(self.wanted("a comparison other than !=")),
            op => op,
        };
        let bound = match self.token_call() {
            true => {
                self.at += 2;
                TokenBound::Of(self.terms_until(")")?)
            }
            false => TokenBound::Value(self.term()?),
        };
        Ok(TokenRelation { columns, op, bound })
    }

    /// Names separated by commas (at least one).
    fn names(&mut self) -> Parsed<Vec<String>> {
        let mut names = vec![self.name()?];
        while self.eat_symbol(",") {
            names.push(self.name()?);
        }
        Ok(names)
    }

    /// `=`, `<`, `<=`, `>`, `>=` or `!=`.
    fn comparison(&mut self) -> Parsed<Op> {
        let op = self.take(|t| match t {
            Token::Symbol("=") => Some(Op::Eq),
            Token::Symbol("<") => Some(Op::Lt),
            Token::Symbol("<=") => Some(Op::Le),
            Token::Symbol(">") => Some(Op::Gt),
            Token::Symbol(">=") => Some(Op::Ge),
            Token::Symbol("!=") => Some(Op::Ne),
            _ => None,
        });
        op.ok_or_else(|| self.wanted("a comparison"))
    }

    fn relation(&mut self) -> Parsed<Relation> {
        let column = self.name()?;
        if self.eat("in") {
            let terms = match self.eat_symbol("(") {
                true => self.terms_until(")")?,
                false => vec![self.term()?],
            };
            return Ok(Relation {
                column,
                op: Op::In,
                terms,
            });
        }
        let op = self.comparison()?;
        Ok(Relation {
            column,
            op,
            terms: vec![self.term()?],
        })
    }

    pub(super) fn update(&mut self) -> Parsed<Update> {
        let table = self.table()?;
        let (ttl, timestamp) = self.using()?;
        self.expect("set")?;
        let mut assignments = vec![self.assignment()?];
        while self.eat_symbol(",") {
            assignments.push(self.assignment()?);
        }
        let relations = self.where_clause(true)?;
        let condition = self.condition()?;
        Ok(Update {
            table,
            ttl,
            timestamp,
            assignments,
            relations,
            condition,
        })
    }

    /// `INSERT INTO t (c, ...) VALUES (v, ...) [USING ...]`, after INSERT.
    pub(super) fn insert(&mut self) -> Parsed<Insert> {
        self.expect("into")?;
        let table = self.table()?;
        self.expect_symbol("(")?;
        let mut columns = vec![self.name()?];
        while self.eat_symbol(",") {
            columns.push(self.name()?);
        }
        self.expect_symbol(")")?;
        self.expect("values")?;
        self.expect_symbol("(")?;
        let values = self.terms_until(")")?;
        if values.len() != columns.len() {
            return Err(SyntaxError(format!(
                "Unmatched column names/values: {} columns, {} values",
                columns.len(),
                values.len()
            )));
        }
        let if_not_exists = self.if_not_exists()?;
        let (ttl, timestamp) = self.using()?;
        if !if_not_exists && self.eat("if") {
            self.expect("not")?;
            self.expect("exists")?;
            return Ok(Insert {
                table,
                columns,
                values,
                ttl,
                timestamp,
                if_not_exists: true,
            });
        }
        Ok(Insert {
            table,
            columns,
            values,
            ttl,
            timestamp,
            if_not_exists,
        })
    }

    /// A write's `IF EXISTS` or `IF col op v AND ...`, if it has one.
    fn condition(&mut self) -> Parsed<Option<Condition>> {
        if !self.eat("if") {
            return Ok(None);
        }
        if self.eat("exists") {
            return Ok(Some(Condition::Exists));
        }
        let mut relations = vec![self.relation()?];
        while self.eat("and") {
            relations.push(self.relation()?);
        }
        Ok(Some(Condition::Columns(relations)))
    }

    /// `USING TTL t AND TIMESTAMP t`, either or both, in any order.
    fn using(&mut self) -> Parsed<(Option<Term>, Option<Term>)> {
        let (mut ttl, mut timestamp) = (None, None);
        if !self.eat("using") {
            return Ok((ttl, timestamp));
        }
        loop {
            if self.eat("ttl") {
                ttl = Some(self.term()?);
            } else if self.eat("timestamp") {
                timestamp = Some(self.term()?);
            } else {
                return Err(self.wanted("TTL or TIMESTAMP"));
            }
            if !self.eat("and") {
                return Ok((ttl, timestamp));
            }
        }
    }

    fn assignment(&mut self) -> Parsed<Assignment> {
        let column = self.name()?;
        self.expect_symbol("=")?;
        let same = matches!(self.peek(), Some(Token::Word(w) | Token::Quoted(w)) if *w == column);
        if same && matches!(self.tokens.get(self.at + 1), Some(Token::Symbol("+" | "-"))) {
            self.at += 1;
            let plus = self.next() == Some(Token::Symbol("+"));
            let term = self.term()?;
            return Ok(match plus {
                true => Assignment::Add(column, term),
                false => Assignment::Sub(column, term),
            });
        }
        let term = self.term()?;
        if self.eat_symbol("+") {
            let again = self.name()?;
            return match again == column {
                true => Ok(Assignment::Add(column, term)),
                false => Err(SyntaxError(format!(
                    "Only expressions of the form X = <value> + X are supported; {column} = ... + {again}"
                ))),
            };
        }
        Ok(Assignment::Set(column, term))
    }

    pub(super) fn delete(&mut self) -> Parsed<Delete> {
        let mut columns = Vec::new();
        if !self.eat("from") {
            columns.push(self.name()?);
            while self.eat_symbol(",") {
                columns.push(self.name()?);
            }
            self.expect("from")?;
        }
        let table = self.table()?;
        let (ttl, timestamp) = self.using()?;
        if ttl.is_some() {
            return Err(SyntaxError("A DELETE takes no TTL".into()));
        }
        let relations = self.where_clause(true)?;
        let condition = self.condition()?;
        Ok(Delete {
            columns,
            table,
            timestamp,
            relations,
            condition,
        })
    }

    pub(super) fn batch(&mut self) -> Parsed<Statement> {
        let kind = match () {
            () if self.eat("unlogged") => BatchKind::Unlogged,
            () if self.eat("counter") => BatchKind::Counter,
            () => BatchKind::Logged,
        };
        self.expect("batch")?;
        let (ttl, timestamp) = self.using()?;
        if ttl.is_some() {
            return Err(SyntaxError("A BATCH takes no TTL".into()));
        }
        let mut statements = Vec::new();
        loop {
            if self.eat("apply") {
                self.expect("batch")?;
                if let Some(ts) = timestamp {
                    statements.iter_mut().for_each(|s| stamp_batch(s, &ts));
                }
                return Ok(Statement::Batch(kind, statements));
            }
            let s = self.statement()?;
            if !matches!(
                s,
                Statement::Update(_) | Statement::Insert(_) | Statement::Delete(_)
            ) {
                return Err(SyntaxError(
                    "a batch holds INSERT, UPDATE and DELETE statements only".into(),
                ));
            }
            statements.push(s);
            self.eat_symbol(";");
        }
    }
}

/// A batch's `USING TIMESTAMP`, given to a statement of it without its own.
fn stamp_batch(statement: &mut Statement, ts: &Term) {
    let own = match statement {
        Statement::Update(u) => &mut u.timestamp,
        Statement::Insert(i) => &mut i.timestamp,
        Statement::Delete(d) => &mut d.timestamp,
        _ => return,
    };
    own.get_or_insert_with(|| ts.clone());
}

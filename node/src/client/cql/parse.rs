//! CQL's grammar, the part Tally serves: a recursive descent over
//! [`super::lex`]'s tokens into [`super::ast`]'s statements.
//!
//! ```text
//! SELECT (* | COUNT(*) | col [AS a], ...) FROM t [WHERE rel AND ...]
//!        [ORDER BY col [ASC|DESC], ...] [LIMIT n] [ALLOW FILTERING]
//! UPDATE t [USING TTL n [AND TIMESTAMP n]] SET c = c + v, d = d - v, e = v WHERE ...
//! DELETE [c, ...] FROM t [USING TIMESTAMP n] WHERE ...
//! BEGIN [UNLOGGED | COUNTER] BATCH statement; ... APPLY BATCH
//! USE ks | TRUNCATE [TABLE] t | DROP (KEYSPACE ks | TABLE t) [IF EXISTS]
//! CREATE KEYSPACE [IF NOT EXISTS] ks WITH replication = {...} [AND durable_writes = b]
//! CREATE TABLE [IF NOT EXISTS] t (col type [PRIMARY KEY], ..., PRIMARY KEY ((pk, ...), ck, ...))
//!        [WITH CLUSTERING ORDER BY (ck DESC, ...) [AND option = v ...]]
//! rel:   col (= | < | <= | > | >=) v | col IN (v, ...) | col IN ?
//! v:     a literal, ?, :name, {k: v, ...}, {a, ...}, [a, ...]
//! ```
//!
//! Markers are numbered in the order they appear, as EXECUTE binds them.
//! What it cannot read is a syntax error that names the token it stopped
//! at, as Cassandra's are (`line 1:n no viable alternative at input ...`
//! comes from its parser generator; drivers show the message, they do not
//! parse it).

use super::ast::*;
use super::lex::{Token, lex};
use super::result::{CqlType, NESTING_MAX};

/// A statement that does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SyntaxError(pub(crate) String);

/// What a parse answers.
type Parsed<T> = Result<T, SyntaxError>;

/// Parses one statement (a trailing `;` allowed); its bind markers count.
pub(crate) fn parse(text: &str) -> Parsed<(Statement, usize)> {
    let tokens = lex(text).map_err(|e| SyntaxError(e.0))?;
    let mut p = Parser {
        tokens,
        at: 0,
        markers: 0,
        depth: 0,
    };
    let statement = p.statement()?;
    p.eat_symbol(";");
    match p.peek() {
        None => Ok((statement, p.markers)),
        Some(t) => Err(p.unexpected(&t.clone(), "the end of the statement")),
    }
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
    markers: usize,
    /// Collections open around the type or literal being read.
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.at).cloned();
        self.at += usize::from(t.is_some());
        t
    }

    /// The next token as `f` reads it, taken only if `f` reads one.
    fn take<T>(&mut self, f: impl FnOnce(&Token) -> Option<T>) -> Option<T> {
        let t = self.peek().and_then(f);
        self.at += usize::from(t.is_some());
        t
    }

    fn unexpected(&self, t: &Token, wanted: &str) -> SyntaxError {
        SyntaxError(format!(
            "line 1:{} mismatched input '{t}' expecting {wanted}",
            self.at
        ))
    }

    fn end(&self, wanted: &str) -> SyntaxError {
        SyntaxError(format!(
            "line 1:{} no viable alternative at end of input, expecting {wanted}",
            self.at
        ))
    }

    /// Whether the next token is the keyword `word`; takes it if so.
    fn eat(&mut self, word: &str) -> bool {
        let is = matches!(self.peek(), Some(Token::Word(w)) if w == word);
        self.at += usize::from(is);
        is
    }

    fn eat_symbol(&mut self, s: &str) -> bool {
        let is = matches!(self.peek(), Some(Token::Symbol(x)) if *x == s);
        self.at += usize::from(is);
        is
    }

    fn expect(&mut self, word: &str) -> Parsed<()> {
        match self.eat(word) {
            true => Ok(()),
            false => Err(self.wanted(&word.to_uppercase())),
        }
    }

    fn expect_symbol(&mut self, s: &str) -> Parsed<()> {
        match self.eat_symbol(s) {
            true => Ok(()),
            false => Err(self.wanted(&format!("'{s}'"))),
        }
    }

    fn wanted(&self, what: &str) -> SyntaxError {
        match self.peek() {
            Some(t) => self.unexpected(t, what),
            None => self.end(what),
        }
    }

    /// A name: an unquoted word (lower-cased) or a quoted one.
    fn name(&mut self) -> Parsed<String> {
        match self.peek() {
            Some(Token::Word(w) | Token::Quoted(w)) => {
                let w = w.clone();
                self.at += 1;
                Ok(w)
            }
            _ => Err(self.wanted("a name")),
        }
    }

    fn table(&mut self) -> Parsed<TableName> {
        let first = self.name()?;
        match self.eat_symbol(".") {
            true => Ok(TableName {
                keyspace: Some(first),
                name: self.name()?,
            }),
            false => Ok(TableName {
                keyspace: None,
                name: first,
            }),
        }
    }

    fn if_exists(&mut self) -> Parsed<bool> {
        match self.eat("if") {
            true => self.expect("exists").map(|()| true),
            false => Ok(false),
        }
    }

    fn if_not_exists(&mut self) -> Parsed<bool> {
        match self.eat("if") {
            true => {
                self.expect("not")?;
                self.expect("exists")?;
                Ok(true)
            }
            false => Ok(false),
        }
    }

    fn statement(&mut self) -> Parsed<Statement> {
        let word = |t: &Token| match t {
            Token::Word(w) => Some(w.clone()),
            _ => None,
        };
        let Some(first) = self.take(word) else {
            return Err(self.wanted("a statement"));
        };
        match first.as_str() {
            "select" => self.select().map(Statement::Select),
            "update" => self.update().map(Statement::Update),
            "delete" => self.delete().map(Statement::Delete),
            "begin" => self.batch(),
            "use" => self.name().map(Statement::Use),
            "truncate" => {
                self.eat("table");
                self.table().map(Statement::Truncate)
            }
            "create" => self.create(),
            "drop" => self.drop(),
            _ => {
                self.at -= 1;
                Err(self.wanted("a statement"))
            }
        }
    }

    fn select(&mut self) -> Parsed<Select> {
        let selection = self.selection()?;
        self.expect("from")?;
        let table = self.table()?;
        let relations = self.where_clause(false)?;
        let mut order_by = Vec::new();
        if self.eat("order") {
            self.expect("by")?;
            loop {
                let column = self.name()?;
                let desc = self.eat("desc");
                if !desc {
                    self.eat("asc");
                }
                order_by.push((column, desc));
                if !self.eat_symbol(",") {
                    break;
                }
            }
        }
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
            order_by,
            limit,
            allow_filtering,
        })
    }

    fn selection(&mut self) -> Parsed<Selection> {
        if self.eat_symbol("*") {
            return Ok(Selection::All);
        }
        let mut columns = Vec::new();
        loop {
            let name = self.name()?;
            if name == "count" && self.eat_symbol("(") {
                if !(self.eat_symbol("*") || matches!(self.next(), Some(Token::Int(1)))) {
                    return Err(self.wanted("'*' or 1"));
                }
                self.expect_symbol(")")?;
                let alias = self.alias()?;
                return match columns.is_empty() {
                    true => Ok(Selection::Count(alias)),
                    false => Err(SyntaxError("COUNT(*) mixed with columns".into())),
                };
            }
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
        let op = self.take(|t| match t {
            Token::Symbol("=") => Some(Op::Eq),
            Token::Symbol("<") => Some(Op::Lt),
            Token::Symbol("<=") => Some(Op::Le),
            Token::Symbol(">") => Some(Op::Gt),
            Token::Symbol(">=") => Some(Op::Ge),
            _ => None,
        });
        let Some(op) = op else {
            return Err(self.wanted("a comparison"));
        };
        Ok(Relation {
            column,
            op,
            terms: vec![self.term()?],
        })
    }

    /// Terms separated by commas, up to the closing `close`.
    fn terms_until(&mut self, close: &str) -> Parsed<Vec<Term>> {
        let mut terms = Vec::new();
        if self.eat_symbol(close) {
            return Ok(terms);
        }
        loop {
            terms.push(self.term()?);
            if self.eat_symbol(close) {
                return Ok(terms);
            }
            self.expect_symbol(",")?;
        }
    }

    fn term(&mut self) -> Parsed<Term> {
        if self.eat_symbol("?") {
            self.markers += 1;
            return Ok(Term::Marker(self.markers - 1));
        }
        if self.eat_symbol(":") {
            let name = self.name()?;
            self.markers += 1;
            return Ok(Term::Named(self.markers - 1, name));
        }
        self.literal().map(Term::Literal)
    }

    /// Enters one more level of nesting (a collection), within
    /// [`NESTING_MAX`]; `inside` reads it.
    fn nested<T>(&mut self, inside: impl FnOnce(&mut Parser) -> Parsed<T>) -> Parsed<T> {
        if self.depth >= NESTING_MAX {
            return Err(SyntaxError("collections nested too deeply".into()));
        }
        self.depth += 1;
        let read = inside(self);
        self.depth -= 1;
        read
    }

    fn literal(&mut self) -> Parsed<Literal> {
        if self.eat_symbol("{") {
            return self.nested(Parser::braces);
        }
        if self.eat_symbol("[") {
            return self.nested(|p| p.literals_until("]").map(Literal::Collection));
        }
        let lit = self.take(|t| match t {
            Token::Str(s) => Some(Literal::Str(s.clone())),
            Token::Int(i) => Some(Literal::Int(*i)),
            Token::Float(x) => Some(Literal::Float(*x)),
            Token::Uuid(u) => Some(Literal::Uuid(*u)),
            Token::Blob(b) => Some(Literal::Blob(b.clone())),
            Token::Word(w) if w == "true" || w == "false" => Some(Literal::Bool(w == "true")),
            Token::Word(w) if w == "null" => Some(Literal::Null),
            _ => None,
        });
        lit.ok_or_else(|| self.wanted("a value"))
    }

    fn literals_until(&mut self, close: &str) -> Parsed<Vec<Literal>> {
        let mut items = Vec::new();
        if self.eat_symbol(close) {
            return Ok(items);
        }
        loop {
            items.push(self.literal()?);
            if self.eat_symbol(close) {
                return Ok(items);
            }
            self.expect_symbol(",")?;
        }
    }

    /// `{k: v, ...}` or `{a, ...}`, after its `{`.
    fn braces(&mut self) -> Parsed<Literal> {
        if self.eat_symbol("}") {
            return Ok(Literal::Map(Vec::new()));
        }
        let first = self.literal()?;
        if !self.eat_symbol(":") {
            let mut items = vec![first];
            if !self.eat_symbol("}") {
                self.expect_symbol(",")?;
                items.extend(self.literals_until("}")?);
            }
            return Ok(Literal::Collection(items));
        }
        let mut pairs = vec![(first, self.literal()?)];
        while self.eat_symbol(",") {
            let k = self.literal()?;
            self.expect_symbol(":")?;
            pairs.push((k, self.literal()?));
        }
        self.expect_symbol("}")?;
        Ok(Literal::Map(pairs))
    }

    fn update(&mut self) -> Parsed<Update> {
        let table = self.table()?;
        let (ttl, timestamp) = self.using()?;
        self.expect("set")?;
        let mut assignments = vec![self.assignment()?];
        while self.eat_symbol(",") {
            assignments.push(self.assignment()?);
        }
        let relations = self.where_clause(true)?;
        Ok(Update {
            table,
            ttl,
            timestamp,
            assignments,
            relations,
        })
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

    fn delete(&mut self) -> Parsed<Delete> {
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
        Ok(Delete {
            columns,
            table,
            timestamp,
            relations,
        })
    }

    fn batch(&mut self) -> Parsed<Statement> {
        let kind = match () {
            () if self.eat("unlogged") => BatchKind::Unlogged,
            () if self.eat("counter") => BatchKind::Counter,
            () => BatchKind::Logged,
        };
        self.expect("batch")?;
        let mut statements = Vec::new();
        loop {
            if self.eat("apply") {
                self.expect("batch")?;
                return Ok(Statement::Batch(kind, statements));
            }
            let s = self.statement()?;
            if !matches!(s, Statement::Update(_) | Statement::Delete(_)) {
                return Err(SyntaxError(
                    "a batch holds UPDATE and DELETE statements only".into(),
                ));
            }
            statements.push(s);
            self.eat_symbol(";");
        }
    }

    fn create(&mut self) -> Parsed<Statement> {
        if self.eat("keyspace") {
            let if_not_exists = self.if_not_exists()?;
            let name = self.name()?;
            self.expect("with")?;
            let options = self.options()?;
            return Ok(Statement::CreateKeyspace {
                name,
                if_not_exists,
                options,
            });
        }
        if !(self.eat("table") || self.eat("columnfamily")) {
            return Err(self.wanted("KEYSPACE or TABLE"));
        }
        self.create_table().map(Statement::CreateTable)
    }

    /// `name = literal AND ...`.
    fn options(&mut self) -> Parsed<Vec<(String, Literal)>> {
        let mut options = Vec::new();
        loop {
            let name = self.name()?;
            self.expect_symbol("=")?;
            options.push((name, self.literal()?));
            if !self.eat("and") {
                return Ok(options);
            }
        }
    }

    fn create_table(&mut self) -> Parsed<CreateTable> {
        let if_not_exists = self.if_not_exists()?;
        let table = self.table()?;
        self.expect_symbol("(")?;
        let mut t = CreateTable {
            table,
            if_not_exists,
            columns: Vec::new(),
            partition_key: Vec::new(),
            clustering: Vec::new(),
            clustering_order: Vec::new(),
            options: Vec::new(),
        };
        loop {
            if self.eat("primary") {
                self.expect("key")?;
                self.primary_key(&mut t)?;
            } else {
                let name = self.name()?;
                let ty = self.cql_type()?;
                if self.eat("primary") {
                    self.expect("key")?;
                    t.partition_key.push(name.clone());
                }
                t.columns.push((name, ty));
            }
            if self.eat_symbol(")") {
                break;
            }
            self.expect_symbol(",")?;
        }
        if self.eat("with") {
            self.table_options(&mut t)?;
        }
        Ok(t)
    }

    /// `((pk, ...), ck, ...)` or `(pk, ck, ...)`, after `PRIMARY KEY`.
    fn primary_key(&mut self, t: &mut CreateTable) -> Parsed<()> {
        if !t.partition_key.is_empty() {
            return Err(SyntaxError(
                "Multiple PRIMARY KEYs specified (exactly one required)".into(),
            ));
        }
        self.expect_symbol("(")?;
        if self.eat_symbol("(") {
            loop {
                t.partition_key.push(self.name()?);
                if self.eat_symbol(")") {
                    break;
                }
                self.expect_symbol(",")?;
            }
        } else {
            t.partition_key.push(self.name()?);
        }
        while self.eat_symbol(",") {
            t.clustering.push(self.name()?);
        }
        self.expect_symbol(")")
    }

    fn table_options(&mut self, t: &mut CreateTable) -> Parsed<()> {
        loop {
            if self.eat("clustering") {
                self.expect("order")?;
                self.expect("by")?;
                self.expect_symbol("(")?;
                loop {
                    let column = self.name()?;
                    let desc = self.eat("desc");
                    if !desc {
                        self.eat("asc");
                    }
                    t.clustering_order.push((column, desc));
                    if self.eat_symbol(")") {
                        break;
                    }
                    self.expect_symbol(",")?;
                }
            } else if self.eat("compact") {
                self.expect("storage")?;
                return Err(SyntaxError(
                    "COMPACT STORAGE tables are not supported".into(),
                ));
            } else {
                let name = self.name()?;
                self.expect_symbol("=")?;
                t.options.push((name, self.literal()?));
            }
            if !self.eat("and") {
                return Ok(());
            }
        }
    }

    fn cql_type(&mut self) -> Parsed<CqlType> {
        let name = self.name()?;
        let simple = match name.as_str() {
            "ascii" => Some(CqlType::Ascii),
            "bigint" => Some(CqlType::Bigint),
            "blob" => Some(CqlType::Blob),
            "boolean" => Some(CqlType::Boolean),
            "counter" => Some(CqlType::Counter),
            "double" => Some(CqlType::Double),
            "int" => Some(CqlType::Int),
            "timestamp" => Some(CqlType::Timestamp),
            "uuid" => Some(CqlType::Uuid),
            "text" | "varchar" => Some(CqlType::Varchar),
            "timeuuid" => Some(CqlType::Timeuuid),
            "inet" => Some(CqlType::Inet),
            "date" => Some(CqlType::Date),
            "smallint" => Some(CqlType::Smallint),
            "tinyint" => Some(CqlType::Tinyint),
            _ => None,
        };
        if let Some(t) = simple {
            return Ok(t);
        }
        self.expect_symbol("<")?;
        self.nested(|p| {
            let first = p.cql_type()?;
            let t = match name.as_str() {
                "frozen" => first,
                "list" => CqlType::List(Box::new(first)),
                "set" => CqlType::Set(Box::new(first)),
                "map" => {
                    p.expect_symbol(",")?;
                    CqlType::Map(Box::new(first), Box::new(p.cql_type()?))
                }
                other => return Err(SyntaxError(format!("Unknown type {other}"))),
            };
            p.expect_symbol(">")?;
            Ok(t)
        })
    }

    fn drop(&mut self) -> Parsed<Statement> {
        if self.eat("keyspace") {
            let if_exists = self.if_exists()?;
            return Ok(Statement::DropKeyspace {
                if_exists,
                name: self.name()?,
            });
        }
        if !(self.eat("table") || self.eat("columnfamily")) {
            return Err(self.wanted("KEYSPACE or TABLE"));
        }
        let if_exists = self.if_exists()?;
        Ok(Statement::DropTable {
            if_exists,
            table: self.table()?,
        })
    }
}

#[cfg(test)]
mod tests;

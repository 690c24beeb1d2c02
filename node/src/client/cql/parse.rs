//! CQL's grammar, the part Tally serves: a recursive descent over
//! [`super::lex`]'s tokens into [`super::ast`]'s statements.
//!
//! ```text
//! SELECT [DISTINCT] (* | COUNT(*) | sel [AS a], ...) FROM t [WHERE rel AND ...]
//!        [GROUP BY col, ...] [ORDER BY col [ASC|DESC], ...] [PER PARTITION LIMIT n]
//!        [LIMIT n] [ALLOW FILTERING]
//! UPDATE t [USING TTL n [AND TIMESTAMP n]] SET c = c + v, d = d - v, e = v WHERE ...
//! INSERT INTO t (c, ...) VALUES (v, ...) [USING TTL n [AND TIMESTAMP n]]
//! DELETE [c, ...] FROM t [USING TIMESTAMP n] WHERE ...
//! BEGIN [UNLOGGED | COUNTER] BATCH statement; ... APPLY BATCH
//! USE ks | TRUNCATE [TABLE] t | DROP (KEYSPACE ks | TABLE t) [IF EXISTS]
//! CREATE KEYSPACE [IF NOT EXISTS] ks WITH replication = {...} [AND durable_writes = b]
//! ALTER TABLE t (ADD c type [STATIC] | ADD (c type, ...) | DROP c | DROP (c, ...) | WITH o = v AND ...)
//! CREATE TABLE [IF NOT EXISTS] t (col type [PRIMARY KEY], ..., PRIMARY KEY ((pk, ...), ck, ...))
//!        [WITH CLUSTERING ORDER BY (ck DESC, ...) [AND option = v ...]]
//! sel:   col | WRITETIME(col) | TTL(col)   (named `writetime(col)`, `ttl(col)`)
//!        | (SUM | AVG | MIN | MAX | COUNT)(col)   (named `system.sum(col)` ...)
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
use super::result::NESTING_MAX;

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

    /// `col [ASC | DESC]` (of `ORDER BY` and `CLUSTERING ORDER BY`): the
    /// column and whether descending.
    fn ordered_column(&mut self) -> Parsed<(String, bool)> {
        let column = self.name()?;
        let desc = self.eat("desc");
        if !desc {
            self.eat("asc");
        }
        Ok((column, desc))
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
            "insert" => self.insert().map(Statement::Insert),
            "delete" => self.delete().map(Statement::Delete),
            "begin" => self.batch(),
            "use" => self.name().map(Statement::Use),
            "truncate" => {
                self.eat("table");
                self.table().map(Statement::Truncate)
            }
            "create" => self.create(),
            "drop" => self.drop(),
            "alter" => self.alter(),
            _ => {
                self.at -= 1;
                Err(self.wanted("a statement"))
            }
        }
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
}

mod ddl;
mod dml;
#[cfg(test)]
mod tests;

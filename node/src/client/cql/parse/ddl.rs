//! The statements on the schema: CREATE and DROP of keyspaces and
//! tables, and CQL's types.

use super::super::ast::*;
use super::super::result::CqlType;
use super::{Parsed, Parser, SyntaxError};

impl Parser {
    pub(super) fn create(&mut self) -> Parsed<Statement> {
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
            statics: Vec::new(),
        };
        loop {
            if self.eat("primary") {
                self.expect("key")?;
                self.primary_key(&mut t)?;
            } else {
                let name = self.name()?;
                let ty = self.cql_type()?;
                if self.eat("static") {
                    t.statics.push(name.clone());
                }
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
                t.clustering_order.push(self.ordered_column()?);
                while self.eat_symbol(",") {
                    t.clustering_order.push(self.ordered_column()?);
                }
                self.expect_symbol(")")?;
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
            "varint" => Some(CqlType::Varint),
            "float" => Some(CqlType::Float),
            "time" => Some(CqlType::Time),
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

    /// `ALTER TABLE t ...`, after ALTER.
    pub(super) fn alter(&mut self) -> Parsed<Statement> {
        if !(self.eat("table") || self.eat("columnfamily")) {
            return Err(self.wanted("TABLE"));
        }
        let table = self.table()?;
        let alteration = if self.eat("add") {
            let one = |p: &mut Self| -> Parsed<(String, CqlType, bool)> {
                let name = p.name()?;
                let ty = p.cql_type()?;
                Ok((name, ty, p.eat("static")))
            };
            Alteration::Add(self.one_or_list(one)?)
        } else if self.eat("drop") {
            Alteration::Drop(self.one_or_list(|p| p.name())?)
        } else if self.eat("with") {
            Alteration::With(self.options()?)
        } else {
            return Err(self.wanted("ADD, DROP or WITH"));
        };
        Ok(Statement::AlterTable(table, alteration))
    }

    /// One `item`, or several in parentheses, separated by commas.
    fn one_or_list<T>(&mut self, mut item: impl FnMut(&mut Self) -> Parsed<T>) -> Parsed<Vec<T>> {
        if !self.eat_symbol("(") {
            return Ok(vec![item(self)?]);
        }
        let mut out = vec![item(self)?];
        while self.eat_symbol(",") {
            out.push(item(self)?);
        }
        self.expect_symbol(")")?;
        Ok(out)
    }

    pub(super) fn drop(&mut self) -> Parsed<Statement> {
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

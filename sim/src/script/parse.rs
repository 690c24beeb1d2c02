//! The golden script format, read and written back (CockroachDB's
//! datadriven, toydb's goldenscript):
//!
//! ```text
//! # A comment, kept as it is.
//! add n1 k 5 cl=quorum
//! read n2 k cl=all
//! ----
//! 5
//! 5
//! ```
//!
//! A block is its comments, one or more commands, the `----` line and the
//! output the commands printed, ending at a blank line. A command is a
//! name, then words: positional arguments and `name=value` options.

use std::collections::BTreeMap;

use anyhow::{Result, bail};

/// The line that ends a block's commands.
pub const SEPARATOR: &str = "----";

/// How an output line that is blank is written.
pub const BLANK: &str = "(blank)";

/// A whole script.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Script {
    /// Its blocks, in order.
    pub blocks: Vec<Block>,
    /// Comments after the last block.
    pub tail: Vec<String>,
}

/// Commands and the output they printed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Block {
    /// Comment (and extra blank) lines before the commands.
    pub comments: Vec<String>,
    /// The commands, in order.
    pub commands: Vec<Command>,
    /// The lines under `----`.
    pub output: Vec<String>,
}

/// One command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// The line, as written (without the spaces around it).
    pub text: String,
    /// Its number in the file, from 1.
    pub line: usize,
    /// The first word.
    pub name: String,
    /// The words after it that are not options.
    pub args: Vec<String>,
    /// Its `name=value` words.
    pub options: BTreeMap<String, String>,
}

impl Command {
    fn parse(text: &str, line: usize) -> Result<Command> {
        let mut words = text.split_whitespace();
        let Some(name) = words.next() else {
            bail!("line {line}: an empty command");
        };
        let mut args = Vec::new();
        let mut options = BTreeMap::new();
        for w in words {
            match w.split_once('=') {
                Some((k, v)) if is_name(k) => {
                    if options.insert(k.to_string(), v.to_string()).is_some() {
                        bail!("line {line}: option {k} given twice");
                    }
                }
                _ => args.push(w.to_string()),
            }
        }
        Ok(Command {
            text: text.to_string(),
            line,
            name: name.to_string(),
            args,
            options,
        })
    }
}

/// Whether `word` names an option (`cl`, `hints.window_ms`): a CQL
/// statement's `>=` is no option.
fn is_name(word: &str) -> bool {
    !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Reads a script; an error names the line.
pub fn parse(text: &str) -> Result<Script> {
    let mut script = Script::default();
    let mut block = Block::default();
    let mut in_output = false;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if in_output {
            match line.trim().is_empty() {
                true => {
                    script.blocks.push(std::mem::take(&mut block));
                    in_output = false;
                }
                false => block.output.push(line.to_string()),
            }
            continue;
        }
        let trimmed = line.trim();
        if trimmed == SEPARATOR {
            if block.commands.is_empty() {
                bail!("line {n}: {SEPARATOR} with no command above it");
            }
            in_output = true;
        } else if trimmed.is_empty() || trimmed.starts_with('#') {
            match block.commands.is_empty() {
                true => block.comments.push(line.to_string()),
                false => bail!("line {n}: a comment among commands (end them with {SEPARATOR})"),
            }
        } else {
            block.commands.push(Command::parse(trimmed, n)?);
        }
    }
    match (in_output, block.commands.is_empty()) {
        (true, _) => script.blocks.push(block),
        (false, true) => script.tail = block.comments,
        (false, false) => bail!("the script ends in commands without {SEPARATOR}"),
    }
    Ok(script)
}

/// Writes `script` back, with `outputs[i]` under block `i`'s commands.
pub fn format(script: &Script, outputs: &[Vec<String>]) -> String {
    let mut text = String::new();
    for (block, output) in script.blocks.iter().zip(outputs) {
        for line in block
            .comments
            .iter()
            .chain(block.commands.iter().map(|c| &c.text))
        {
            text.push_str(line);
            text.push('\n');
        }
        text.push_str(SEPARATOR);
        text.push('\n');
        for line in output {
            // A blank line would end the block: print it visibly.
            match line.trim().is_empty() {
                true => text.push_str(BLANK),
                false => text.push_str(line),
            }
            text.push('\n');
        }
        text.push('\n');
    }
    for line in &script.tail {
        text.push_str(line);
        text.push('\n');
    }
    // One newline at the end, not a blank line.
    while text.ends_with("\n\n") {
        text.pop();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# a cluster\ncluster nodes=3\n----\nok\n\n# two adds\nadd n1 k 5\nadd n2 k 1 cl=all\n----\n5\n6\n";

    #[test]
    fn a_script_reads_into_blocks_and_writes_back_as_it_was() {
        let s = parse(TEXT).unwrap();
        assert_eq!(s.blocks.len(), 2);
        assert_eq!(s.blocks[1].comments, vec!["# two adds"]);
        let add = &s.blocks[1].commands[1];
        assert_eq!((add.name.as_str(), add.line), ("add", 8));
        assert_eq!(add.args, vec!["n2", "k", "1"]);
        assert_eq!(add.options.get("cl").map(String::as_str), Some("all"));
        assert_eq!(s.blocks[1].output, vec!["5", "6"]);
        let outputs: Vec<_> = s.blocks.iter().map(|b| b.output.clone()).collect();
        assert_eq!(format(&s, &outputs), TEXT);
    }

    #[test]
    fn new_output_replaces_the_old() {
        let s = parse(TEXT).unwrap();
        let text = format(&s, &[vec!["ok".into()], vec!["5".into(), "7".into()]]);
        assert!(text.ends_with("----\n5\n7\n"), "{text}");
    }

    #[test]
    fn malformed_scripts_name_the_line() {
        for (text, want) in [
            ("----\n", "line 1"),
            ("add n1 k 1\n# note\n----\n", "line 2"),
            ("add n1 k 1\n", "without ----"),
            ("add n1 k=1 k=2\n----\n", "given twice"),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn only_a_name_before_equals_makes_an_option() {
        let s = parse("cql n1 page=2 SELECT c WHERE c >= 0 AND k = 1\n----\n").unwrap();
        let c = &s.blocks[0].commands[0];
        assert_eq!(c.options.len(), 1);
        assert_eq!(c.options.get("page").map(String::as_str), Some("2"));
        let args = "n1 SELECT c WHERE c >= 0 AND k = 1";
        assert_eq!(c.args, args.split(' ').collect::<Vec<_>>());
    }

    #[test]
    fn a_blank_output_line_is_written_visibly() {
        let s = parse("get n1 k\n----\n").unwrap();
        let text = format(&s, &[vec![String::new()]]);
        assert_eq!(text, "get n1 k\n----\n(blank)\n");
    }

    #[test]
    fn comments_after_the_last_block_are_kept() {
        let text = "ping\n----\nok\n\n# the end\n";
        let s = parse(text).unwrap();
        assert_eq!(s.tail, vec!["# the end"]);
        assert_eq!(format(&s, &[vec!["ok".into()]]), text);
    }
}

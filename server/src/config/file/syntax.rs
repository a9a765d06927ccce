//! The nats-server config syntax, from text to a tree of [`Entry`]s; knows nothing of [`Config`].
//!
//! The format is nats-server's "conf" format: `key = value`, `key: value` or `key value`;
//! blocks `key { ... }`; arrays `[a, b]` with commas or newlines; `#` and `//` comments;
//! `"..."` strings with escapes, `'...'` raw strings, `(` ... `)` block strings whose `)` stands
//! alone on a line; bare words; `include path`; and `$NAME` variables.
//!
//! Invariants worth naming:
//! - Scalars that are not quoted stay text ([`Value::Bare`]). Whether `2m` is a duration, a size
//!   or a string, and whether `yes` is a boolean, depends on the key, so the mapping decides.
//! - Variables and includes are resolved here, while parsing, so the tree holds no references.
//!   A `$NAME` resolves to the latest earlier `NAME` in the enclosing blocks (innermost first),
//!   then to the environment variable `NAME`, parsed as a value; otherwise it is an error.
//! - An included file's entries go into the block that holds the `include`, so variables it
//!   defines are visible after it. Its errors name the included file.
//!
//! [`Config`]: crate::config::Config

use std::path::Path;
use std::sync::Arc;

use super::error::{ConfigError, Location};

/// How deep `include` may nest before we assume a cycle.
const MAX_INCLUDE_DEPTH: usize = 16;

/// Reads an environment variable. A parameter so that tests need not mutate the process
/// environment (which is `unsafe` in edition 2024).
pub(super) type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// A value and where it starts.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Node {
    /// The value.
    pub(super) value: Value,
    /// Where the value starts (for a variable: where it is referenced).
    pub(super) at: Location,
}

/// A parsed value.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Value {
    /// A `"..."`, `'...'` or `( ... )` string.
    Quoted(String),
    /// An unquoted word such as `4222`, `64MB`, `true` or `0.0.0.0:4222`.
    Bare(String),
    /// `[ ... ]`.
    Array(Vec<Node>),
    /// `{ ... }`, entries in file order (later duplicates win when mapped).
    Map(Vec<Entry>),
}

/// One `key = value` of a block.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Entry {
    /// The key as written (keys are matched case-insensitively by the mapping).
    pub(super) key: String,
    /// Where the key starts.
    pub(super) at: Location,
    /// The value.
    pub(super) node: Node,
    /// Some `$key` referred to this entry: the mapping does not report it as unknown.
    pub(super) used_as_variable: bool,
}

/// Parses a whole document (or included file) into its top-level entries.
pub(super) fn parse_document(
    text: &str,
    file: Arc<Path>,
    env: Env<'_>,
) -> Result<Vec<Entry>, ConfigError> {
    let mut scopes = Scopes {
        stack: vec![Vec::new()],
        env,
        depth: 0,
    };
    Parser::new(text, file, true).document(&mut scopes)?;
    Ok(scopes.stack.pop().unwrap_or_default())
}

/// The blocks being built, innermost last: where entries go and where variables are found.
struct Scopes<'e> {
    stack: Vec<Vec<Entry>>,
    env: Env<'e>,
    depth: usize,
}

impl Scopes<'_> {
    fn insert(&mut self, entry: Entry) {
        if let Some(top) = self.stack.last_mut() {
            top.push(entry);
        }
    }

    /// The latest definition of `name` in the enclosing blocks, innermost first.
    fn lookup(&mut self, name: &str) -> Option<Node> {
        for scope in self.stack.iter_mut().rev() {
            if let Some(entry) = scope.iter_mut().rev().find(|e| e.key == name) {
                entry.used_as_variable = true;
                return Some(entry.node.clone());
            }
        }
        None
    }
}

/// A cursor over one text (a file, an included file, or an environment variable's value).
struct Parser<'t> {
    text: &'t str,
    pos: usize,
    line: u32,
    column: u32,
    file: Arc<Path>,
    /// False while parsing an environment variable's value: `$` is then literal, so a variable
    /// cannot expand to itself forever.
    variables: bool,
}

/// Characters that end an unquoted value.
fn ends_bare_value(c: char) -> bool {
    c.is_whitespace() || matches!(c, ',' | ';' | ']' | '}')
}

/// Characters that end an unquoted key.
fn ends_bare_key(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '=' | ':' | '{' | '[' | '}' | ']' | ',' | ';' | '#' | '"' | '\''
        )
}

impl<'t> Parser<'t> {
    fn new(text: &'t str, file: Arc<Path>, variables: bool) -> Self {
        Parser {
            text,
            pos: 0,
            line: 1,
            column: 1,
            file,
            variables,
        }
    }

    fn here(&self) -> Location {
        Location {
            file: self.file.clone(),
            line: self.line,
            column: self.column,
        }
    }

    fn error(&self, at: &Location, message: impl Into<String>) -> ConfigError {
        ConfigError::invalid(at, message)
    }

    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn peek_second(&self) -> Option<char> {
        self.text[self.pos..].chars().nth(1)
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        if c == '\n' {
            self.line += 1;
            self.column = 1;
        } else {
            self.column += 1;
        }
        Some(c)
    }

    fn at_comment(&self) -> bool {
        self.peek() == Some('#') || (self.peek() == Some('/') && self.peek_second() == Some('/'))
    }

    /// Skips to the end of the line, leaving the newline.
    fn skip_comment(&mut self) {
        while self.peek().is_some_and(|c| c != '\n') {
            self.bump();
        }
    }

    /// Skips spaces and tabs (and a `\r`), but not newlines.
    fn skip_spaces(&mut self) {
        while self
            .peek()
            .is_some_and(|c| c == ' ' || c == '\t' || c == '\r')
        {
            self.bump();
        }
    }

    /// Skips whitespace, newlines and comments.
    fn skip_blank(&mut self) {
        loop {
            match self.peek() {
                Some(c) if c.is_whitespace() => {
                    self.bump();
                }
                Some(_) if self.at_comment() => self.skip_comment(),
                _ => return,
            }
        }
    }

    /// The whole text: entries, optionally wrapped in one `{ }` as nats-server allows.
    fn document(&mut self, scopes: &mut Scopes<'_>) -> Result<(), ConfigError> {
        self.skip_blank();
        if self.peek() == Some('{') {
            let open = self.here();
            self.bump();
            self.entries(scopes, Some(&open))?;
            self.skip_blank();
            if let Some(c) = self.peek() {
                return Err(self.error(
                    &self.here(),
                    format!("unexpected {c:?} after the closing '}}'"),
                ));
            }
            return Ok(());
        }
        self.entries(scopes, None)
    }

    /// Entries up to the `}` matching `open`, or to the end of the text when `open` is `None`.
    fn entries(
        &mut self,
        scopes: &mut Scopes<'_>,
        open: Option<&Location>,
    ) -> Result<(), ConfigError> {
        loop {
            self.skip_blank();
            match (self.peek(), open) {
                (None, None) => return Ok(()),
                (None, Some(open)) => {
                    return Err(self.error(open, "unterminated block: no closing '}'"));
                }
                (Some('}'), Some(_)) => {
                    self.bump();
                    return Ok(());
                }
                _ => {}
            }
            self.entry(scopes)?;
            self.skip_spaces();
            if self.at_comment() {
                self.skip_comment();
            }
            match self.peek() {
                None | Some('\n' | '}') => {}
                Some(',' | ';') => {
                    self.bump();
                }
                Some(c) => {
                    return Err(self.error(
                        &self.here(),
                        format!("unexpected {c:?} after a value; expected a new line, ',' or ';'"),
                    ));
                }
            }
        }
    }

    /// One `key [=|:] value` or `include path`.
    fn entry(&mut self, scopes: &mut Scopes<'_>) -> Result<(), ConfigError> {
        let at = self.here();
        let (key, quoted) = self.key()?;
        let separated_by_space = self.peek().is_some_and(|c| c == ' ' || c == '\t');
        self.skip_spaces();
        if !quoted
            && separated_by_space
            && key.eq_ignore_ascii_case("include")
            && !matches!(self.peek(), Some('=' | ':'))
        {
            return self.include(scopes, &at);
        }
        if matches!(self.peek(), Some('=' | ':')) {
            self.bump();
            self.skip_spaces();
        }
        let node = self.value(scopes, &key)?;
        scopes.insert(Entry {
            key,
            at,
            node,
            used_as_variable: false,
        });
        Ok(())
    }

    /// A key, and whether it was quoted.
    fn key(&mut self) -> Result<(String, bool), ConfigError> {
        let at = self.here();
        match self.peek() {
            Some(q @ ('"' | '\'')) => {
                self.bump();
                let start = self.pos;
                loop {
                    match self.bump() {
                        Some(c) if c == q => break,
                        Some('\n') | None => return Err(self.error(&at, "unterminated quoted key")),
                        Some(_) => {}
                    }
                }
                Ok((self.text[start..self.pos - 1].to_string(), true))
            }
            _ => {
                let start = self.pos;
                while self.peek().is_some_and(|c| !ends_bare_key(c)) {
                    self.bump();
                }
                if self.pos == start {
                    let found = self
                        .peek()
                        .map_or("end of file".to_string(), |c| format!("{c:?}"));
                    return Err(self.error(&at, format!("expected a key, found {found}")));
                }
                Ok((self.text[start..self.pos].to_string(), false))
            }
        }
    }

    /// `include path`: parses the file into the current block.
    fn include(&mut self, scopes: &mut Scopes<'_>, at: &Location) -> Result<(), ConfigError> {
        let name = match self.peek() {
            Some(q @ ('"' | '\'')) => {
                let open = self.here();
                self.bump();
                let start = self.pos;
                while self.peek().is_some_and(|c| c != q && c != '\n') {
                    self.bump();
                }
                if self.peek() != Some(q) {
                    return Err(self.error(&open, "unterminated string"));
                }
                self.bump();
                &self.text[start..self.pos - 1]
            }
            _ => {
                let start = self.pos;
                while self.peek().is_some_and(|c| !ends_bare_value(c)) {
                    self.bump();
                }
                &self.text[start..self.pos]
            }
        };
        if name.is_empty() {
            return Err(self.error(at, "include needs a file name"));
        }
        if scopes.depth >= MAX_INCLUDE_DEPTH {
            return Err(self.error(at, format!("include of {name:?} nested more than {MAX_INCLUDE_DEPTH} deep (an include cycle?)")));
        }
        let path = self
            .file
            .parent()
            .unwrap_or_else(|| Path::new(""))
            .join(name);
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Include {
            location: at.clone(),
            path: path.clone(),
            source,
        })?;
        scopes.depth += 1;
        let result = Parser::new(&text, Arc::from(path), self.variables).document(scopes);
        scopes.depth -= 1;
        result
    }

    /// A value, which must start on the current line.
    fn value(&mut self, scopes: &mut Scopes<'_>, key: &str) -> Result<Node, ConfigError> {
        let at = self.here();
        let value = match self.peek() {
            None | Some('\n' | '}' | ']' | ',' | ';') => {
                return Err(self.error(&at, format!("expected a value for {key:?}")));
            }
            Some(_) if self.at_comment() => {
                return Err(self.error(&at, format!("expected a value for {key:?}")));
            }
            Some('[') => {
                self.bump();
                Value::Array(self.array(scopes, &at, key)?)
            }
            Some('{') => {
                self.bump();
                scopes.stack.push(Vec::new());
                let result = self.entries(scopes, Some(&at));
                let entries = scopes.stack.pop().unwrap_or_default();
                result?;
                Value::Map(entries)
            }
            Some('"') => Value::Quoted(self.double_quoted(&at)?),
            Some('\'') => Value::Quoted(self.single_quoted(&at)?),
            Some('(') => Value::Quoted(self.block_string(&at)?),
            Some(_) => {
                let start = self.pos;
                while self.peek().is_some_and(|c| !ends_bare_value(c)) {
                    self.bump();
                }
                let word = &self.text[start..self.pos];
                match word.strip_prefix('$') {
                    Some(name) if self.variables && !is_bcrypt_hash(word) => {
                        return self.variable(scopes, name, at);
                    }
                    _ => Value::Bare(word.to_string()),
                }
            }
        };
        Ok(Node { value, at })
    }

    /// Array items after `[`, up to the matching `]`.
    fn array(
        &mut self,
        scopes: &mut Scopes<'_>,
        open: &Location,
        key: &str,
    ) -> Result<Vec<Node>, ConfigError> {
        let mut items = Vec::new();
        loop {
            self.skip_blank();
            match self.peek() {
                None => return Err(self.error(open, "unterminated array: no closing ']'")),
                Some(']') => {
                    self.bump();
                    return Ok(items);
                }
                Some(',') => return Err(self.error(&self.here(), "unexpected ',' in array")),
                Some(_) => {}
            }
            items.push(self.value(scopes, key)?);
            self.skip_spaces();
            if self.at_comment() {
                self.skip_comment();
            }
            match self.peek() {
                Some(',' | '\n') => {
                    self.bump();
                }
                Some(']') | None => {}
                Some(c) => {
                    return Err(self.error(
                        &self.here(),
                        format!("unexpected {c:?} in array; expected ',' or ']'"),
                    ));
                }
            }
        }
    }

    /// `"..."` with the escapes nats-server knows: `\t \n \r \" \\ \xHH`.
    fn double_quoted(&mut self, open: &Location) -> Result<String, ConfigError> {
        self.bump();
        let mut out = String::new();
        let mut bytes: Vec<u8> = Vec::new();
        loop {
            let escape_at = self.here();
            match self.bump() {
                None => return Err(self.error(open, "unterminated string")),
                Some('"') => break,
                Some('\\') => {
                    let escaped = match self.bump() {
                        Some('t') => '\t',
                        Some('n') => '\n',
                        Some('r') => '\r',
                        Some('"') => '"',
                        Some('\\') => '\\',
                        Some('x') => {
                            let hex: String =
                                [self.bump(), self.bump()].into_iter().flatten().collect();
                            let valid =
                                hex.len() == 2 && hex.chars().all(|c| c.is_ascii_hexdigit());
                            let byte = u8::from_str_radix(&hex, 16).ok().filter(|_| valid);
                            let Some(byte) = byte else {
                                return Err(self.error(
                                    &escape_at,
                                    format!(
                                        "expected two hexadecimal digits after '\\x', got {hex:?}"
                                    ),
                                ));
                            };
                            bytes.push(byte);
                            continue;
                        }
                        other => {
                            let shown =
                                other.map_or("end of file".to_string(), |c| format!("{c:?}"));
                            return Err(self.error(&escape_at, format!("invalid escape {shown}; only \\xHH, \\t, \\n, \\r, \\\" and \\\\ are allowed")));
                        }
                    };
                    flush_bytes(&mut bytes, &mut out);
                    out.push(escaped);
                }
                Some(c) => {
                    flush_bytes(&mut bytes, &mut out);
                    out.push(c);
                }
            }
        }
        flush_bytes(&mut bytes, &mut out);
        Ok(out)
    }

    /// `'...'`, taken literally.
    fn single_quoted(&mut self, open: &Location) -> Result<String, ConfigError> {
        self.bump();
        let start = self.pos;
        while self.peek().is_some_and(|c| c != '\'') {
            self.bump();
        }
        if self.bump().is_none() {
            return Err(self.error(open, "unterminated string"));
        }
        Ok(self.text[start..self.pos - 1].to_string())
    }

    /// `(` text `)`, where the closing `)` stands alone on its line; taken literally, without
    /// the newline before the `)`.
    fn block_string(&mut self, open: &Location) -> Result<String, ConfigError> {
        self.bump();
        let start = self.pos;
        let rest = &self.text[start..];
        let mut offset = 0;
        let mut close = None;
        for line in rest.split_inclusive('\n') {
            if offset > 0 && line.trim() == ")" {
                close = Some(offset);
                break;
            }
            offset += line.len();
        }
        let Some(close) = close else {
            return Err(self.error(open, "unterminated block string: no ')' alone on a line"));
        };
        let content = rest[..close].trim_end_matches(['\n', '\r']).to_string();
        let end = start + close + rest[close..].find(')').map_or(0, |i| i + 1);
        while self.pos < end {
            self.bump();
        }
        Ok(content)
    }

    /// Resolves `$name`: enclosing blocks first, then the environment.
    fn variable(
        &mut self,
        scopes: &mut Scopes<'_>,
        name: &str,
        at: Location,
    ) -> Result<Node, ConfigError> {
        if name.is_empty() {
            return Err(self.error(&at, "'$' without a variable name"));
        }
        if let Some(mut node) = scopes.lookup(name) {
            node.at = at;
            return Ok(node);
        }
        let Some(raw) = (scopes.env)(name) else {
            return Err(self.error(&at, format!("variable reference for {name:?} can not be found (not defined above, nor in the environment)")));
        };
        Ok(Node {
            value: env_value(&raw, &at),
            at,
        })
    }
}

/// An environment variable's value, read as a config value (so `4222` is a number and `[a, b]`
/// an array); text that does not parse as exactly one value is taken as a string.
fn env_value(raw: &str, at: &Location) -> Value {
    let mut parser = Parser::new(raw, at.file.clone(), false);
    let mut scopes = Scopes {
        stack: vec![Vec::new()],
        env: &no_env,
        depth: MAX_INCLUDE_DEPTH,
    };
    parser.skip_spaces();
    match parser.value(&mut scopes, "environment variable") {
        Ok(node) => {
            parser.skip_blank();
            if parser.peek().is_none() {
                node.value
            } else {
                Value::Quoted(raw.to_string())
            }
        }
        Err(_) => Value::Quoted(raw.to_string()),
    }
}

/// The environment seen while parsing an environment variable's value: none.
fn no_env(_: &str) -> Option<String> {
    None
}

/// `$2a$...`, `$2b$...`, `$2y$...` are bcrypt hashes, not variables (nats-server does the same
/// for `$2a$`), so hashed passwords need no quotes.
fn is_bcrypt_hash(word: &str) -> bool {
    ["$2a$", "$2b$", "$2y$"].iter().any(|p| word.starts_with(p))
}

/// Appends pending `\xHH` bytes to `out` (lossily, if they are not UTF-8).
fn flush_bytes(bytes: &mut Vec<u8>, out: &mut String) {
    if !bytes.is_empty() {
        out.push_str(&String::from_utf8_lossy(bytes));
        bytes.clear();
    }
}

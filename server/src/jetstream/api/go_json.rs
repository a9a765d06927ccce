//! Go `encoding/json` decoding errors, as nats-server reports them for `$JS.API` bodies.
//!
//! nats-server decodes a request with a `json.Decoder` that disallows unknown fields, calling
//! `Decode` until end of input (so `{} {}` is two values, and `{} x` fails on the second). The
//! first error is what clients see after `invalid JSON: `. This module reproduces those texts
//! from the raw body and a description of the Go type ([`GoStruct`]), before serde decodes it:
//! - syntax errors in Go's scanner words plus ` at offset N` (nats-server appends the offset);
//!   input ending inside a value is `unexpected EOF`;
//! - type mismatches (`json: cannot unmarshal string into Go struct field
//!   StreamConfigRequest.max_msgs of type int64`), the first one in document order, like
//!   unknown fields (`json: unknown field "x"`); numbers that do not fit are named with their
//!   literal (`number 1.5`);
//! - custom `UnmarshalJSON` types (enums, `time.Time`) abort decoding at once with their own text
//!   (`can not unmarshal "\"bogus\""`).
//!
//! Everything here is pure and bounded by the input size; nesting is limited to [`MAX_DEPTH`]
//! (serde_json's own limit, well within a task's stack; Go allows 10,000 levels, so a request
//! nested deeper than 128 levels gets `exceeded max depth` here where Go may answer otherwise).

/// Deepest nesting accepted; deeper input is refused with Go's `exceeded max depth` text.
pub const MAX_DEPTH: usize = 128;

/// A Go struct: its name as errors show it and its JSON fields (embedded structs flattened).
#[derive(Debug)]
pub struct GoStruct {
    /// Unqualified name (`StreamConfigRequest`), used as the error's struct context.
    pub name: &'static str,
    /// Qualified name (`server.StreamConfigRequest`), used as a value's type.
    pub qualified: &'static str,
    /// `(json name, type)` of every field.
    pub fields: &'static [(&'static str, Ty)],
}

/// A Go type as far as JSON decoding errors are concerned.
#[derive(Debug)]
pub enum Ty {
    /// `bool`.
    Bool,
    /// `string`.
    Str,
    /// `int` (64 bits).
    Int,
    /// `int32`.
    Int32,
    /// `int64`.
    Int64,
    /// `uint64`.
    Uint64,
    /// `time.Duration`.
    Duration,
    /// `time.Time` or `*time.Time` (`UnmarshalJSON`: RFC 3339 strings, `null` ignored).
    Time,
    /// A type with its own `UnmarshalJSON`.
    Enum(Enum),
    /// A slice, with its Go type name (`[]string`).
    Slice(&'static Ty, &'static str),
    /// A map with string keys, with its Go type name (`map[string]string`).
    Map(&'static Ty, &'static str),
    /// A struct or pointer to struct.
    Struct(&'static GoStruct),
}

/// The custom `UnmarshalJSON` methods of nats-server's enums.
#[derive(Debug)]
pub enum Enum {
    /// Accepts exactly these raw JSON texts; else `can not unmarshal "<raw>"` (Go `%q`).
    Exact(&'static [&'static str]),
    /// Like `Exact`, compared lower-cased (`DiscardPolicy`).
    Lower(&'static [&'static str]),
    /// `StoreCompression`: a JSON string `s2` or `none`.
    Compression,
    /// `ConsumerAction`: `unknown consumer action: <raw>`.
    Action,
    /// `PriorityPolicy`: `unknown priority policy: <raw>`.
    Priority,
}

/// Checks `body` as nats-server's request decoder would decode it into `root`; `Err` holds the
/// text that follows `invalid JSON: `.
pub fn check(body: &[u8], root: &'static GoStruct) -> Result<(), String> {
    let mut p = Parser { src: body, pos: 0 };
    loop {
        p.skip_ws();
        if p.pos >= body.len() {
            return Ok(());
        }
        let value = p.value(0)?;
        let mut d = Decoder {
            src: body,
            saved: None,
            stack: Vec::new(),
            structs: Vec::new(),
            allow_unknown: false,
        };
        d.decode(&value, &Ty::Struct(root))?;
        if let Some(e) = d.saved {
            return Err(e);
        }
    }
}

/// Renames the keys of `value` that Go matches to a field case-insensitively (`"NAME"` for
/// `name`) to the field's own name, in nested structs too, so serde decodes what Go decodes.
/// When both spellings are present the exact one wins.
pub fn canonicalize(value: &mut serde_json::Value, schema: &'static GoStruct) {
    let serde_json::Value::Object(map) = value else {
        return;
    };
    let keys: Vec<String> = map.keys().cloned().collect();
    for key in keys {
        if schema.fields.iter().any(|(n, _)| *n == key) {
            continue;
        }
        if let Some((name, _)) = schema
            .fields
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(&key))
            && let Some(v) = map.remove(&key)
        {
            map.entry((*name).to_string()).or_insert(v);
        }
    }
    for (name, ty) in schema.fields {
        let Some(v) = map.get_mut(*name) else {
            continue;
        };
        match ty {
            Ty::Struct(inner) => canonicalize(v, inner),
            Ty::Slice(Ty::Struct(inner), _) => {
                if let serde_json::Value::Array(items) = v {
                    for item in items {
                        canonicalize(item, inner);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Checks `body` as Go's plain `json.Unmarshal` into `root` (unknown fields ignored, exactly
/// one value): the few handlers of nats-server that do not use its request decoder (UNPIN).
pub fn check_unmarshal(body: &[u8], root: &'static GoStruct) -> Result<(), String> {
    let plain = |e: String| {
        if e == "unexpected EOF" {
            return "unexpected end of JSON input".to_string();
        }
        match e.rfind(" at offset ") {
            Some(i) => e[..i].to_string(),
            None => e,
        }
    };
    let mut p = Parser { src: body, pos: 0 };
    let value = p.value(0).map_err(plain)?;
    p.skip_ws();
    if p.pos < body.len() {
        return Err(plain(p.syntax("after top-level value")));
    }
    let mut d = Decoder {
        src: body,
        saved: None,
        stack: Vec::new(),
        structs: Vec::new(),
        allow_unknown: true,
    };
    d.decode(&value, &Ty::Struct(root))?;
    d.saved.map_or(Ok(()), Err)
}

/// Checks only the syntax of `body` as Go's decoder reads it (for request types without a
/// [`GoStruct`]); `Err` holds the text that follows `invalid JSON: `.
pub fn check_syntax(body: &[u8]) -> Result<(), String> {
    let mut p = Parser { src: body, pos: 0 };
    loop {
        p.skip_ws();
        if p.pos >= body.len() {
            return Ok(());
        }
        p.value(0)?;
    }
}

/// A parsed JSON value with its byte span in the input.
#[derive(Debug)]
struct Val {
    start: usize,
    end: usize,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Null,
    Bool,
    Num,
    Str,
    Arr(Vec<Val>),
    Obj(Vec<(String, Val)>),
}

struct Parser<'a> {
    src: &'a [u8],
    pos: usize,
}

/// Go's `quoteChar`: the character in single quotes, escaped like a Go string.
fn quote_char(c: char) -> String {
    match c {
        '\'' => "'\\''".to_string(),
        '"' => "'\"'".to_string(),
        _ => {
            let q = go_quote(&c.to_string());
            format!("'{}'", &q[1..q.len() - 1])
        }
    }
}

/// Go's `strconv.Quote` (`%q`) for the characters that occur in practice.
pub fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while self.pos < self.src.len()
            && matches!(self.src[self.pos], b' ' | b'\t' | b'\n' | b'\r')
        {
            self.pos += 1;
        }
    }

    /// The character at `pos` (decoded as UTF-8 where possible).
    fn char_at(&self) -> char {
        let rest = &self.src[self.pos..];
        let n = rest.len().min(4);
        for len in 1..=n {
            if let Ok(s) = std::str::from_utf8(&rest[..len])
                && let Some(c) = s.chars().next()
            {
                return c;
            }
        }
        char::REPLACEMENT_CHARACTER
    }

    fn syntax(&self, context: &str) -> String {
        if self.pos >= self.src.len() {
            return "unexpected EOF".to_string();
        }
        format!(
            "invalid character {} {context} at offset {}",
            quote_char(self.char_at()),
            self.pos + 1
        )
    }

    fn peek(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    fn value(&mut self, depth: usize) -> Result<Val, String> {
        if depth > MAX_DEPTH {
            return Err("exceeded max depth".to_string());
        }
        self.skip_ws();
        let start = self.pos;
        let kind = match self.peek() {
            None => return Err("unexpected EOF".to_string()),
            Some(b'{') => self.object(depth)?,
            Some(b'[') => self.array(depth)?,
            Some(b'"') => {
                self.string()?;
                Kind::Str
            }
            Some(b't') => self.literal("true", Kind::Bool)?,
            Some(b'f') => self.literal("false", Kind::Bool)?,
            Some(b'n') => self.literal("null", Kind::Null)?,
            Some(b'-' | b'0'..=b'9') => self.number()?,
            Some(_) => return Err(self.syntax("looking for beginning of value")),
        };
        Ok(Val {
            start,
            end: self.pos,
            kind,
        })
    }

    fn literal(&mut self, word: &str, kind: Kind) -> Result<Kind, String> {
        for (i, expected) in word.bytes().enumerate() {
            if i > 0 {
                match self.peek() {
                    Some(b) if b == expected => {}
                    _ => {
                        return Err(self.syntax(&format!(
                            "in literal {word} (expecting {})",
                            quote_char(expected as char)
                        )));
                    }
                }
            }
            self.pos += 1;
        }
        Ok(kind)
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Result<Kind, String> {
        if self.peek() == Some(b'-') {
            self.pos += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.syntax("in numeric literal"));
            }
        }
        if self.peek() == Some(b'0') {
            self.pos += 1;
        } else {
            self.digits();
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return Err(self.syntax("after decimal point in numeric literal"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.syntax("in exponent of numeric literal"));
            }
        }
        Ok(Kind::Num)
    }

    /// Scans a string starting at `"`; returns its decoded text.
    fn string(&mut self) -> Result<String, String> {
        self.pos += 1;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let Some(b) = self.peek() else {
                return Err("unexpected EOF".to_string());
            };
            match b {
                b'"' => {
                    self.pos += 1;
                    return Ok(String::from_utf8_lossy(&out).into_owned());
                }
                b'\\' => {
                    self.pos += 1;
                    let Some(e) = self.peek() else {
                        return Err("unexpected EOF".to_string());
                    };
                    let simple = match e {
                        b'"' => Some(b'"'),
                        b'\\' => Some(b'\\'),
                        b'/' => Some(b'/'),
                        b'b' => Some(8),
                        b'f' => Some(12),
                        b'n' => Some(b'\n'),
                        b'r' => Some(b'\r'),
                        b't' => Some(b'\t'),
                        b'u' => None,
                        _ => return Err(self.syntax("in string escape code")),
                    };
                    self.pos += 1;
                    match simple {
                        Some(c) => out.push(c),
                        None => {
                            let mut code = 0u32;
                            for _ in 0..4 {
                                let Some(h) = self.peek() else {
                                    return Err("unexpected EOF".to_string());
                                };
                                let Some(d) = (h as char).to_digit(16) else {
                                    return Err(self.syntax("in \\u hexadecimal character escape"));
                                };
                                code = code * 16 + d;
                                self.pos += 1;
                            }
                            let c = char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER);
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                        }
                    }
                }
                b if b < 0x20 => return Err(self.syntax("in string literal")),
                b => {
                    out.push(b);
                    self.pos += 1;
                }
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<Kind, String> {
        self.pos += 1;
        let mut members = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Kind::Obj(members));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.syntax("looking for beginning of object key string"));
            }
            let key = self.string()?;
            self.skip_ws();
            if self.peek() != Some(b':') {
                return Err(self.syntax("after object key"));
            }
            self.pos += 1;
            let v = self.value(depth + 1)?;
            members.push((key, v));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Kind::Obj(members));
                }
                _ => return Err(self.syntax("after object key:value pair")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Kind, String> {
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Kind::Arr(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Kind::Arr(items));
                }
                _ => return Err(self.syntax("after array element")),
            }
        }
    }
}

/// One path element of the error context.
enum PathElem {
    Field(String),
    Index(usize),
}

struct Decoder<'a> {
    src: &'a [u8],
    /// The first saved (non-fatal) error, as Go's `saveError`.
    saved: Option<String>,
    /// Field names and indexes from the root to the value being decoded.
    stack: Vec<PathElem>,
    /// Names of the structs being decoded, outermost first.
    structs: Vec<&'static str>,
    /// Unknown fields are skipped (plain `json.Unmarshal`) instead of refused.
    allow_unknown: bool,
}

impl Ty {
    /// The Go type's name in error texts.
    fn go_name(&self) -> &'static str {
        match self {
            Ty::Bool => "bool",
            Ty::Str => "string",
            Ty::Int => "int",
            Ty::Int32 => "int32",
            Ty::Int64 => "int64",
            Ty::Uint64 => "uint64",
            Ty::Duration => "time.Duration",
            Ty::Time => "time.Time",
            Ty::Enum(_) => "enum",
            Ty::Slice(_, n) | Ty::Map(_, n) => n,
            Ty::Struct(s) => s.qualified,
        }
    }
}

impl Decoder<'_> {
    fn save(&mut self, what: &str, ty: &Ty) {
        if self.saved.is_some() {
            return;
        }
        let path: Vec<String> = self
            .stack
            .iter()
            .map(|e| match e {
                PathElem::Field(f) => f.clone(),
                PathElem::Index(i) => i.to_string(),
            })
            .collect();
        // Go names the outermost struct, whatever the depth of the field.
        let text = match (self.structs.first(), path.is_empty()) {
            (None, true) => format!(
                "json: cannot unmarshal {what} into Go value of type {}",
                ty.go_name()
            ),
            (s, _) => {
                let s = s.copied().unwrap_or_default();
                let kind = if matches!(self.stack.last(), Some(PathElem::Index(_))) {
                    ""
                } else {
                    "Go struct field "
                };
                format!(
                    "json: cannot unmarshal {what} into {kind}{s}.{} of type {}",
                    path.join("."),
                    ty.go_name()
                )
            }
        };
        self.saved = Some(text);
    }

    fn raw(&self, v: &Val) -> String {
        String::from_utf8_lossy(&self.src[v.start..v.end]).into_owned()
    }

    fn decode(&mut self, v: &Val, ty: &Ty) -> Result<(), String> {
        match ty {
            Ty::Enum(e) => return self.custom(v, e),
            Ty::Time => return self.time(v),
            _ => {}
        }
        match &v.kind {
            Kind::Null => {}
            Kind::Bool => {
                if !matches!(ty, Ty::Bool) {
                    self.save("bool", ty);
                }
            }
            Kind::Str => {
                if !matches!(ty, Ty::Str) {
                    self.save("string", ty);
                }
            }
            Kind::Num => {
                let lit = self.raw(v);
                let fits = match ty {
                    Ty::Int | Ty::Int64 | Ty::Duration => lit.parse::<i64>().is_ok(),
                    Ty::Int32 => lit.parse::<i32>().is_ok(),
                    Ty::Uint64 => lit.parse::<u64>().is_ok(),
                    _ => {
                        self.save("number", ty);
                        return Ok(());
                    }
                };
                if !fits {
                    self.save(&format!("number {lit}"), ty);
                }
            }
            Kind::Arr(items) => match ty {
                Ty::Slice(elem, _) => {
                    for (i, item) in items.iter().enumerate() {
                        self.stack.push(PathElem::Index(i));
                        let r = self.decode(item, elem);
                        self.stack.pop();
                        r?;
                    }
                }
                _ => self.save("array", ty),
            },
            Kind::Obj(members) => match ty {
                Ty::Struct(s) => {
                    self.structs.push(s.name);
                    let r = self.object(members, s);
                    self.structs.pop();
                    r?;
                }
                Ty::Map(elem, _) => {
                    for (key, item) in members {
                        self.stack.push(PathElem::Field(key.clone()));
                        let r = self.decode(item, elem);
                        self.stack.pop();
                        r?;
                    }
                }
                _ => self.save("object", ty),
            },
        }
        Ok(())
    }

    fn object(&mut self, members: &[(String, Val)], s: &GoStruct) -> Result<(), String> {
        for (key, item) in members {
            let field = s
                .fields
                .iter()
                .find(|(n, _)| n == key)
                .or_else(|| s.fields.iter().find(|(n, _)| n.eq_ignore_ascii_case(key)));
            let Some((name, ty)) = field else {
                if self.saved.is_none() && !self.allow_unknown {
                    self.saved = Some(format!("json: unknown field {}", go_quote(key)));
                }
                continue;
            };
            self.stack.push(PathElem::Field((*name).to_string()));
            let r = self.decode(item, ty);
            self.stack.pop();
            r?;
        }
        Ok(())
    }

    fn custom(&mut self, v: &Val, e: &Enum) -> Result<(), String> {
        let raw = self.raw(v);
        let ok = match e {
            Enum::Exact(list) => list.contains(&raw.as_str()),
            Enum::Lower(list) => list.contains(&raw.to_lowercase().as_str()),
            Enum::Compression => {
                return match &v.kind {
                    Kind::Str if raw == "\"s2\"" || raw == "\"none\"" => Ok(()),
                    Kind::Str | Kind::Null => Err("unknown compression algorithm".to_string()),
                    Kind::Bool => Err(type_of_string("bool")),
                    Kind::Num => Err(type_of_string("number")),
                    Kind::Arr(_) => Err(type_of_string("array")),
                    Kind::Obj(_) => Err(type_of_string("object")),
                };
            }
            Enum::Action => {
                return if ["\"\"", "\"create\"", "\"update\""].contains(&raw.as_str()) {
                    Ok(())
                } else {
                    Err(format!("unknown consumer action: {raw}"))
                };
            }
            Enum::Priority => {
                return if [
                    "\"none\"",
                    "\"overflow\"",
                    "\"pinned_client\"",
                    "\"prioritized\"",
                ]
                .contains(&raw.as_str())
                {
                    Ok(())
                } else {
                    Err(format!("unknown priority policy: {raw}"))
                };
            }
        };
        if ok {
            Ok(())
        } else {
            Err(format!("can not unmarshal {}", go_quote(&raw)))
        }
    }

    /// `time.Time` decodes as a text unmarshaler: a string is parsed at once (its error aborts),
    /// other values are saved type errors.
    fn time(&mut self, v: &Val) -> Result<(), String> {
        let raw = self.raw(v);
        match &v.kind {
            Kind::Null => {}
            Kind::Str => return check_rfc3339(&raw[1..raw.len() - 1]),
            Kind::Bool => self.save("bool", &Ty::Time),
            Kind::Num => self.save("number", &Ty::Time),
            Kind::Arr(_) => self.save("array", &Ty::Time),
            Kind::Obj(_) => self.save("object", &Ty::Time),
        }
        Ok(())
    }
}

fn type_of_string(what: &str) -> String {
    format!("json: cannot unmarshal {what} into Go value of type string")
}

/// Go's RFC 3339 parse of `s` (`time.Time.UnmarshalText`), with its error text: the first
/// layout element that does not match (`cannot parse "x" as "2006"`), or the first field out of
/// range (`month out of range`, then day, hour, minute, second as Go checks them).
pub fn check_rfc3339(s: &str) -> Result<(), String> {
    const LAYOUT: &str = "2006-01-02T15:04:05Z07:00";
    let fail = |rest: &str, elem: &str| {
        Err(format!(
            "parsing time {} as {}: cannot parse {} as {}",
            go_quote(s),
            go_quote(LAYOUT),
            go_quote(rest),
            go_quote(elem)
        ))
    };
    let b = s.as_bytes();
    let mut i = 0;
    let digits =
        |i: usize, n: usize| b.len() >= i + n && b[i..i + n].iter().all(u8::is_ascii_digit);
    let mut fields = [0u32; 6];
    for (k, (elem, n, sep)) in [
        ("2006", 4, Some(b'-')),
        ("01", 2, Some(b'-')),
        ("02", 2, Some(b'T')),
        ("15", 2, Some(b':')),
        ("04", 2, Some(b':')),
        ("05", 2, None),
    ]
    .into_iter()
    .enumerate()
    {
        if !digits(i, n) {
            return fail(&s[i..], elem);
        }
        fields[k] = s[i..i + n].parse().unwrap_or(0);
        i += n;
        if let Some(sep) = sep {
            if b.get(i) != Some(&sep) {
                return fail(&s[i..], &(sep as char).to_string());
            }
            i += 1;
        }
    }
    let [year, month, day, hour, minute, second] = fields;
    let out_of_range =
        |what: &str| Err(format!("parsing time {}: {what} out of range", go_quote(s)));
    if !(1..=12).contains(&month) {
        return out_of_range("month");
    }
    if !(1..=31).contains(&day) {
        return out_of_range("day");
    }
    if hour >= 24 {
        return out_of_range("hour");
    }
    if minute >= 60 {
        return out_of_range("minute");
    }
    if second >= 60 {
        return out_of_range("second");
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
    }
    let zone_ok = match b.get(i) {
        Some(b'Z') => i + 1 == b.len(),
        Some(b'+' | b'-') => {
            b.len() == i + 6 && digits(i + 1, 2) && b[i + 3] == b':' && digits(i + 4, 2)
        }
        _ => false,
    };
    if !zone_ok {
        return fail(&s[i..], "Z07:00");
    }
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if day > days_in_month {
        return out_of_range("day");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    static INNER: GoStruct = GoStruct {
        name: "Inner",
        qualified: "server.Inner",
        fields: &[("x", Ty::Str)],
    };
    static ROOT: GoStruct = GoStruct {
        name: "Req",
        qualified: "server.Req",
        fields: &[
            ("n", Ty::Int64),
            ("u", Ty::Uint64),
            ("s", Ty::Str),
            ("l", Ty::Slice(&Ty::Str, "[]string")),
            ("m", Ty::Map(&Ty::Str, "map[string]string")),
            ("in", Ty::Struct(&INNER)),
            ("e", Ty::Enum(Enum::Exact(&["\"a\""]))),
            ("t", Ty::Time),
        ],
    };

    fn err(body: &str) -> String {
        check(body.as_bytes(), &ROOT).expect_err(body)
    }

    #[test]
    fn accepts_what_go_accepts() {
        for body in [
            "",
            "  ",
            "null",
            "{}",
            "{} {}",
            r#"{"n":-5,"u":1,"s":null,"l":["a"]}"#,
        ] {
            assert_eq!(check(body.as_bytes(), &ROOT), Ok(()), "{body}");
        }
    }

    #[test]
    fn syntax_errors_carry_go_texts_and_offsets() {
        assert_eq!(err("{\"n\":"), "unexpected EOF");
        assert_eq!(
            err("{} x"),
            "invalid character 'x' looking for beginning of value at offset 4"
        );
        assert_eq!(
            err("not json"),
            "invalid character 'o' in literal null (expecting 'u') at offset 2"
        );
        assert_eq!(
            err("{bad"),
            "invalid character 'b' looking for beginning of object key string at offset 2"
        );
    }

    #[test]
    fn type_errors_name_the_field_path() {
        assert_eq!(
            err(r#"{"n":"1"}"#),
            "json: cannot unmarshal string into Go struct field Req.n of type int64"
        );
        assert_eq!(
            err(r#"{"n":1.5}"#),
            "json: cannot unmarshal number 1.5 into Go struct field Req.n of type int64"
        );
        assert_eq!(
            err(r#"{"u":-1}"#),
            "json: cannot unmarshal number -1 into Go struct field Req.u of type uint64"
        );
        assert_eq!(
            err(r#"{"l":[1]}"#),
            "json: cannot unmarshal number into Req.l.0 of type string"
        );
        assert_eq!(
            err(r#"{"m":{"a":1}}"#),
            "json: cannot unmarshal number into Go struct field Req.m.a of type string"
        );
        assert_eq!(
            err(r#"{"in":{"x":1}}"#),
            "json: cannot unmarshal number into Go struct field Req.in.x of type string"
        );
        assert_eq!(
            err("\"x\""),
            "json: cannot unmarshal string into Go value of type server.Req"
        );
        assert_eq!(err(r#"{"zz":1,"n":"x"}"#), "json: unknown field \"zz\"");
    }

    #[test]
    fn multi_byte_input_never_splits_a_character() {
        for t in [
            "2020-01-0é",
            "é",
            "2020-01-01T00:00:00é",
            "2020-01-01T00:00:00.1€",
            "２０２０",
        ] {
            let body = format!("{{\"t\":\"{t}\"}}");
            assert!(check(body.as_bytes(), &ROOT).is_err(), "{t}");
        }
        assert!(check("{\"é\":1}".as_bytes(), &ROOT).is_err());
        assert!(check(b"{\"s\":\"\xff\"}", &ROOT).is_ok());
        assert!(check(b"\xff", &ROOT).is_err());
    }

    #[test]
    fn plain_unmarshal_has_its_own_texts() {
        let e = |b: &str| check_unmarshal(b.as_bytes(), &ROOT).expect_err(b);
        assert_eq!(e(""), "unexpected end of JSON input");
        assert_eq!(e("{\"n\":"), "unexpected end of JSON input");
        assert_eq!(
            e("junk"),
            "invalid character 'j' looking for beginning of value"
        );
        assert_eq!(e("{} x"), "invalid character 'x' after top-level value");
        assert_eq!(check_unmarshal(br#"{"zz":1}"#, &ROOT), Ok(()));
    }

    #[test]
    fn deep_nesting_is_refused_without_recursing_further() {
        let deep = "[".repeat(100_000);
        assert_eq!(err(&deep), "exceeded max depth");
        let fine = format!("{{\"l\":{}{}}}", "[".repeat(50), "]".repeat(50));
        assert!(check(fine.as_bytes(), &ROOT).is_err());
    }

    #[test]
    fn custom_unmarshalers_abort_with_their_text() {
        assert_eq!(err(r#"{"e":"b"}"#), r#"can not unmarshal "\"b\"""#);
        assert_eq!(err(r#"{"e":1}"#), r#"can not unmarshal "1""#);
        assert_eq!(
            err(r#"{"t":"x"}"#),
            r#"parsing time "x" as "2006-01-02T15:04:05Z07:00": cannot parse "x" as "2006""#
        );
        assert_eq!(
            err(r#"{"t":1}"#),
            "json: cannot unmarshal number into Go struct field Req.t of type time.Time"
        );
        assert_eq!(check(br#"{"t":"2020-01-01T00:00:00Z"}"#, &ROOT), Ok(()));
        assert_eq!(
            check(br#"{"t":"2024-02-29T23:59:59.5+01:00"}"#, &ROOT),
            Ok(())
        );
        assert_eq!(
            err(r#"{"t":"2023-02-29T00:00:00Z"}"#),
            r#"parsing time "2023-02-29T00:00:00Z": day out of range"#
        );
        assert_eq!(
            err(r#"{"t":"2020-13-01T00:00:00Z"}"#),
            r#"parsing time "2020-13-01T00:00:00Z": month out of range"#
        );
    }
}

//! Tests of the config syntax: separators, comments, blocks, arrays, strings, variables,
//! includes, and syntax errors with file, line and column.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use super::error::ConfigError;
use super::syntax::{Entry, Env, Value, parse_document};

fn no_env(_: &str) -> Option<String> {
    None
}

fn parse_with(text: &str, env: Env<'_>) -> Result<Vec<Entry>, ConfigError> {
    parse_document(text, Arc::from(Path::new("test.conf")), env)
}

fn parse(text: &str) -> Vec<Entry> {
    parse_with(text, &no_env).unwrap_or_else(|e| panic!("parse failed: {e}\n{text}"))
}

fn parse_err(text: &str) -> String {
    match parse_with(text, &no_env) {
        Ok(entries) => panic!("expected an error, parsed {entries:?}"),
        Err(e) => e.to_string(),
    }
}

/// The last value of `key`, which must exist.
fn get<'a>(entries: &'a [Entry], key: &str) -> &'a Value {
    match entries.iter().rev().find(|e| e.key == key) {
        Some(entry) => &entry.node.value,
        None => panic!("no key {key:?} in {entries:?}"),
    }
}

fn map(value: &Value) -> &[Entry] {
    match value {
        Value::Map(entries) => entries,
        other => panic!("expected a block, got {other:?}"),
    }
}

fn bare(s: &str) -> Value {
    Value::Bare(s.to_string())
}

fn quoted(s: &str) -> Value {
    Value::Quoted(s.to_string())
}

fn array_of(value: &Value) -> Vec<Value> {
    match value {
        Value::Array(items) => items.iter().map(|n| n.value.clone()).collect(),
        other => panic!("expected an array, got {other:?}"),
    }
}

#[test]
fn keys_and_values_separate_by_equals_colon_or_whitespace() {
    let e = parse("a = 1\nb: 2\nc 3\nd=4\ne:five\n\tf \t six");
    assert_eq!(get(&e, "a"), &bare("1"));
    assert_eq!(get(&e, "b"), &bare("2"));
    assert_eq!(get(&e, "c"), &bare("3"));
    assert_eq!(get(&e, "d"), &bare("4"));
    assert_eq!(get(&e, "e"), &bare("five"));
    assert_eq!(get(&e, "f"), &bare("six"));
}

#[test]
fn bare_values_keep_colons_slashes_and_hashes() {
    let e = parse("listen: 0.0.0.0:4222\nurl: nats://h:6222\nx: a#b\nsize: 64MB\nneg: -1\nf: 0.5");
    assert_eq!(get(&e, "listen"), &bare("0.0.0.0:4222"));
    assert_eq!(get(&e, "url"), &bare("nats://h:6222"));
    assert_eq!(get(&e, "x"), &bare("a#b"));
    assert_eq!(get(&e, "size"), &bare("64MB"));
    assert_eq!(get(&e, "neg"), &bare("-1"));
    assert_eq!(get(&e, "f"), &bare("0.5"));
}

#[test]
fn comments_with_hash_and_double_slash_are_skipped() {
    let e =
        parse("# heading\n// another\na = 1 # trailing\nb = 2 // trailing\n  # indented\nc = 3");
    assert_eq!(e.len(), 3);
    assert_eq!(get(&e, "b"), &bare("2"));
    assert_eq!(get(&e, "c"), &bare("3"));
}

#[test]
fn semicolons_and_commas_end_values_on_one_line() {
    let e = parse("a = 1; b = 2, c = 3;\nd = 4");
    assert_eq!(
        e.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(),
        ["a", "b", "c", "d"]
    );
}

#[test]
fn blocks_take_every_form() {
    let e = parse(
        "a { x = 1 }\nb = { y: 2 }\nc: {\n  z 3\n  w 4\n}\nd{v=5}\ne {\n  inner { deep = 6 }\n}",
    );
    assert_eq!(get(map(get(&e, "a")), "x"), &bare("1"));
    assert_eq!(get(map(get(&e, "b")), "y"), &bare("2"));
    assert_eq!(get(map(get(&e, "c")), "w"), &bare("4"));
    assert_eq!(get(map(get(&e, "d")), "v"), &bare("5"));
    assert_eq!(
        get(map(get(map(get(&e, "e")), "inner")), "deep"),
        &bare("6")
    );
}

#[test]
fn arrays_separate_by_commas_or_newlines() {
    let e =
        parse("a = [1, 2, 3]\nb = [\n  x\n  y # note\n  // note\n  z,\n]\nc []\nd = [[1], {k: v}]");
    assert_eq!(array_of(get(&e, "a")), [bare("1"), bare("2"), bare("3")]);
    assert_eq!(array_of(get(&e, "b")), [bare("x"), bare("y"), bare("z")]);
    assert!(array_of(get(&e, "c")).is_empty());
    let d = array_of(get(&e, "d"));
    assert_eq!(array_of(&d[0]), [bare("1")]);
    assert_eq!(get(map(&d[1]), "k"), &bare("v"));
}

#[test]
fn double_quoted_strings_unescape_like_nats_server() {
    let e = parse(r#"s = "tab\there \"q\" back\\slash \x41\x42 nl\n""#);
    assert_eq!(get(&e, "s"), &quoted("tab\there \"q\" back\\slash AB nl\n"));
}

#[test]
fn single_quoted_strings_are_literal() {
    let e = parse(r"s = 'a\tb $NOT_A_VAR # not a comment'");
    assert_eq!(get(&e, "s"), &quoted(r"a\tb $NOT_A_VAR # not a comment"));
}

#[test]
fn quoted_strings_keep_spaces_and_special_characters() {
    let e = parse("a = \"x y, z]}\"\nb: '1 2'");
    assert_eq!(get(&e, "a"), &quoted("x y, z]}"));
    assert_eq!(get(&e, "b"), &quoted("1 2"));
}

#[test]
fn block_strings_run_to_a_lone_closing_paren() {
    let e = parse("cert = (\nline one )\nline two\n)\nafter = 1");
    assert_eq!(get(&e, "cert"), &quoted("\nline one )\nline two"));
    assert_eq!(get(&e, "after"), &bare("1"));
}

#[test]
fn quoted_keys_may_hold_spaces() {
    let e = parse("\"my key\" = 1\n'other key': 2");
    assert_eq!(get(&e, "my key"), &bare("1"));
    assert_eq!(get(&e, "other key"), &bare("2"));
}

#[test]
fn the_whole_document_may_be_wrapped_in_braces() {
    let e = parse("{\n  a = 1\n  b { c = 2 }\n}\n");
    assert_eq!(get(&e, "a"), &bare("1"));
    assert_eq!(get(map(get(&e, "b")), "c"), &bare("2"));
}

#[test]
fn crlf_line_endings_are_accepted() {
    let e = parse("a = 1\r\nb {\r\n  c = 2\r\n}\r\nd = [x,\r\n y]\r\n");
    assert_eq!(get(&e, "a"), &bare("1"));
    assert_eq!(get(map(get(&e, "b")), "c"), &bare("2"));
    assert_eq!(array_of(get(&e, "d")), [bare("x"), bare("y")]);
}

#[test]
fn variables_resolve_to_earlier_top_level_definitions() {
    let e = parse("PORT = 4333\nport = $PORT\nSUBJECTS = [a, b]\nlist = $SUBJECTS");
    assert_eq!(get(&e, "port"), &bare("4333"));
    assert_eq!(array_of(get(&e, "list")), [bare("a"), bare("b")]);
}

#[test]
fn variables_resolve_innermost_block_first_and_latest_definition_wins() {
    let text = "X = outer\nX = outer2\nb {\n  in_outer = $X\n  X = inner\n  in_inner = $X\n  c { deep = $X }\n}\nafter = $X";
    let e = parse(text);
    let b = map(get(&e, "b"));
    assert_eq!(get(b, "in_outer"), &bare("outer2"));
    assert_eq!(get(b, "in_inner"), &bare("inner"));
    assert_eq!(get(map(get(b, "c")), "deep"), &bare("inner"));
    assert_eq!(
        get(&e, "after"),
        &bare("outer2"),
        "a block's variables stay inside it"
    );
}

#[test]
fn used_variables_are_marked() {
    let e = parse("A = 1\nB = 2\nc = $A");
    assert!(
        e.iter()
            .find(|e| e.key == "A")
            .is_some_and(|e| e.used_as_variable)
    );
    assert!(
        !e.iter()
            .find(|e| e.key == "B")
            .is_some_and(|e| e.used_as_variable)
    );
}

#[test]
fn variables_fall_back_to_the_environment_parsed_as_values() {
    let env = |name: &str| match name {
        "PORT" => Some("4444".to_string()),
        "NAME" => Some("two words".to_string()),
        "LIST" => Some("[a, b]".to_string()),
        "SELF" => Some("$SELF".to_string()),
        _ => None,
    };
    let e = parse_with("p = $PORT\nn = $NAME\nl = $LIST\ns = $SELF", &env).expect("parses");
    assert_eq!(get(&e, "p"), &bare("4444"));
    assert_eq!(get(&e, "n"), &quoted("two words"));
    assert_eq!(array_of(get(&e, "l")), [bare("a"), bare("b")]);
    assert_eq!(
        get(&e, "s"),
        &bare("$SELF"),
        "an environment value is not expanded again"
    );
}

#[test]
fn file_definitions_shadow_the_environment() {
    let env = |_: &str| Some("from-env".to_string());
    let e = parse_with("V = from-file\nx = $V\ny = $OTHER", &env).expect("parses");
    assert_eq!(get(&e, "x"), &bare("from-file"));
    assert_eq!(get(&e, "y"), &bare("from-env"));
}

#[test]
fn undefined_variable_is_an_error_with_line_and_column() {
    let err = parse_err("a = 1\nb {\n  c = $MISSING\n}");
    assert_eq!(
        err,
        "test.conf:3:7: variable reference for \"MISSING\" can not be found \
         (not defined above, nor in the environment)"
    );
}

#[test]
fn a_variable_used_before_its_definition_is_undefined() {
    assert!(parse_err("a = $B\nB = 1").starts_with("test.conf:1:5: variable reference for \"B\""));
}

#[test]
fn bcrypt_hashes_are_not_variables() {
    let hash = "$2a$11$W2zko751KUvVy59mUTWmpOdWjpEm5qhcCZRd05GjI/sSOT.xtiHyG";
    let e = parse(&format!("password: {hash}"));
    assert_eq!(get(&e, "password"), &bare(hash));
}

/// Writes `files` (name, text) into a fresh directory and returns it.
fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, text) in files {
        let path = dir.path().join(name);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).expect("mkdir");
        }
        fs::write(path, text).expect("write");
    }
    dir
}

fn parse_file(path: &Path) -> Result<Vec<Entry>, ConfigError> {
    let text = fs::read_to_string(path).expect("read");
    parse_document(&text, Arc::from(path), &no_env)
}

#[test]
fn include_is_relative_to_the_including_file_and_merges_in_place() {
    let dir = dir_with(&[
        (
            "main.conf",
            "a = 1\ninclude ./sub/part.conf\nb = $FROM_PART\nblk {\n  include 'sub/inner.conf'\n}",
        ),
        ("sub/part.conf", "FROM_PART = 2\nc = 3"),
        ("sub/inner.conf", "d = 4"),
    ]);
    let e = parse_file(&dir.path().join("main.conf")).expect("parses");
    assert_eq!(get(&e, "c"), &bare("3"));
    assert_eq!(
        get(&e, "b"),
        &bare("2"),
        "variables from an include are visible after it"
    );
    assert_eq!(get(map(get(&e, "blk")), "d"), &bare("4"));
}

#[test]
fn include_chains_resolve_relative_to_each_file() {
    let dir = dir_with(&[
        ("main.conf", "include \"a/one.conf\""),
        ("a/one.conf", "include b/two.conf"),
        ("a/b/two.conf", "deep = yes"),
    ]);
    let e = parse_file(&dir.path().join("main.conf")).expect("parses");
    assert_eq!(get(&e, "deep"), &bare("yes"));
}

#[test]
fn errors_in_an_included_file_name_that_file() {
    let dir = dir_with(&[
        ("main.conf", "a = 1\ninclude other.conf"),
        ("other.conf", "x = 1\ny {\n  z = 2\n"),
    ]);
    let err = parse_file(&dir.path().join("main.conf"))
        .expect_err("fails")
        .to_string();
    let other = dir.path().join("other.conf");
    assert_eq!(
        err,
        format!(
            "{}:2:3: unterminated block: no closing '}}'",
            other.display()
        )
    );
}

#[test]
fn a_missing_include_names_the_include_statement_and_the_file() {
    let dir = dir_with(&[("main.conf", "a = 1\n  include nope.conf\n")]);
    let main = dir.path().join("main.conf");
    let err = parse_file(&main).expect_err("fails");
    assert!(
        matches!(&err, ConfigError::Include { path, .. } if path == &dir.path().join("nope.conf"))
    );
    assert_eq!(
        err.to_string(),
        format!(
            "{}:2:3: cannot read included file {}",
            main.display(),
            dir.path().join("nope.conf").display()
        )
    );
}

#[test]
fn include_cycles_are_reported_not_followed_forever() {
    let dir = dir_with(&[("a.conf", "include b.conf"), ("b.conf", "include a.conf")]);
    let err = parse_file(&dir.path().join("a.conf"))
        .expect_err("fails")
        .to_string();
    assert!(err.contains("an include cycle?"), "{err}");
}

#[test]
fn a_key_named_include_with_a_separator_is_an_ordinary_key() {
    let e = parse("include = yes\nInclude: no");
    assert_eq!(get(&e, "include"), &bare("yes"));
    assert_eq!(get(&e, "Include"), &bare("no"));
}

#[test]
fn syntax_errors_name_file_line_and_column() {
    let cases = [
        (
            "a = 1\nb {\n  c = 2\n",
            "test.conf:2:3: unterminated block: no closing '}'",
        ),
        ("a = \"open\nb = 2", "test.conf:1:5: unterminated string"),
        ("a = 'open", "test.conf:1:5: unterminated string"),
        (
            "a = [1, 2\n",
            "test.conf:1:5: unterminated array: no closing ']'",
        ),
        (
            "a = (\nno close",
            "test.conf:1:5: unterminated block string: no ')' alone on a line",
        ),
        ("a =\nb = 1", "test.conf:1:4: expected a value for \"a\""),
        ("a = # comment", "test.conf:1:5: expected a value for \"a\""),
        (
            "a = 1 2",
            "test.conf:1:7: unexpected '2' after a value; expected a new line, ',' or ';'",
        ),
        ("a = [1,, 2]", "test.conf:1:8: unexpected ',' in array"),
        (
            "a = [1 2]",
            "test.conf:1:8: unexpected '2' in array; expected ',' or ']'",
        ),
        (
            "a = \"bad \\q\"",
            "test.conf:1:10: invalid escape 'q'; only \\xHH, \\t, \\n, \\r, \\\" and \\\\ are allowed",
        ),
        (
            "a = \"\\xZZ\"",
            "test.conf:1:6: expected two hexadecimal digits after '\\x', got \"ZZ\"",
        ),
        ("a = 1\n}", "test.conf:2:1: expected a key, found '}'"),
        ("= 1", "test.conf:1:1: expected a key, found '='"),
        ("\"open key = 1", "test.conf:1:1: unterminated quoted key"),
        (
            "{ a = 1 } b",
            "test.conf:1:11: unexpected 'b' after the closing '}'",
        ),
        ("a = $", "test.conf:1:5: '$' without a variable name"),
    ];
    for (text, expected) in cases {
        assert_eq!(parse_err(text), expected, "for {text:?}");
    }
}

#[test]
fn empty_and_comment_only_documents_have_no_entries() {
    assert!(parse("").is_empty());
    assert!(parse("\n  # nothing\n// here\n").is_empty());
    assert!(parse("{}").is_empty());
}

#[test]
fn value_locations_point_at_the_value() {
    let e = parse("a = 1\n  key:   value");
    let entry = e.iter().find(|e| e.key == "key").expect("key");
    assert_eq!((entry.at.line, entry.at.column), (2, 3));
    assert_eq!((entry.node.at.line, entry.node.at.column), (2, 10));
}

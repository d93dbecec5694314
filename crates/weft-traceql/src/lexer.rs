//! Turns query text into tokens.
//!
//! Attributes are lexed whole (`span.http.request.method` is one token), because their names may
//! contain characters that are operators elsewhere (`.`, `-`, `/`, `:`). A name runs until
//! whitespace or one of `{ } ( ) = ~ ! < > & | ^ , " `` ` ``, or is written as a quoted string
//! (`span."name with spaces"`).

use crate::ParseError;
use crate::ast::{Attribute, AttributeScope};

/// A 1-based position in the query text; columns count characters, not bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pos {
    pub line: u32,
    pub column: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    /// A bare word, including the colon forms (`span:name`).
    Ident(String),
    Attr(Attribute),
    Str(String),
    Int(i64),
    Float(f64),
    Duration(i64),
    LBrace,
    RBrace,
    LParen,
    RParen,
    Comma,
    Pipe,
    And,
    Or,
    Not,
    Eq,
    Neq,
    Re,
    /// `!~`: not-regex between values, not-sibling between spansets.
    Nre,
    Lt,
    Lte,
    Gt,
    Gte,
    Desc,
    Anc,
    Tilde,
    NotChild,
    NotDesc,
    NotParent,
    NotAnc,
    UnionChild,
    UnionDesc,
    UnionParent,
    UnionAnc,
    UnionSibling,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Caret,
    Eof,
}

impl Tok {
    /// How an error message names this token.
    pub(crate) fn describe(&self) -> String {
        match self {
            Tok::Ident(word) => format!("'{word}'"),
            Tok::Attr(attr) => format!("attribute '{}'", crate::printer::attribute_to_string(attr)),
            Tok::Str(s) => format!("string {}", crate::printer::quote(s)),
            Tok::Int(i) => format!("number {i}"),
            Tok::Float(f) => format!("number {f:?}"),
            Tok::Duration(ns) => format!("duration {}", crate::printer::duration_to_string(*ns)),
            Tok::Eof => "end of query".to_string(),
            other => format!("'{}'", other.symbol()),
        }
    }

    fn symbol(&self) -> &'static str {
        match self {
            Tok::LBrace => "{",
            Tok::RBrace => "}",
            Tok::LParen => "(",
            Tok::RParen => ")",
            Tok::Comma => ",",
            Tok::Pipe => "|",
            Tok::And => "&&",
            Tok::Or => "||",
            Tok::Not => "!",
            Tok::Eq => "=",
            Tok::Neq => "!=",
            Tok::Re => "=~",
            Tok::Nre => "!~",
            Tok::Lt => "<",
            Tok::Lte => "<=",
            Tok::Gt => ">",
            Tok::Gte => ">=",
            Tok::Desc => ">>",
            Tok::Anc => "<<",
            Tok::Tilde => "~",
            Tok::NotChild => "!>",
            Tok::NotDesc => "!>>",
            Tok::NotParent => "!<",
            Tok::NotAnc => "!<<",
            Tok::UnionChild => "&>",
            Tok::UnionDesc => "&>>",
            Tok::UnionParent => "&<",
            Tok::UnionAnc => "&<<",
            Tok::UnionSibling => "&~",
            Tok::Plus => "+",
            Tok::Minus => "-",
            Tok::Star => "*",
            Tok::Slash => "/",
            Tok::Percent => "%",
            Tok::Caret => "^",
            // Tokens with a payload are described by `describe`.
            _ => "",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Token {
    pub tok: Tok,
    pub pos: Pos,
}

/// Splits `input` into tokens, ending with one `Tok::Eof`.
pub(crate) fn tokenize(input: &str) -> Result<Vec<Token>, ParseError> {
    let mut lexer = Lexer {
        chars: input.chars().collect(),
        i: 0,
        line: 1,
        column: 1,
    };
    let mut tokens = Vec::new();
    loop {
        while lexer.peek().is_some_and(char::is_whitespace) {
            lexer.bump();
        }
        let pos = lexer.pos();
        let tok = lexer.token(pos)?;
        let end = tok == Tok::Eof;
        tokens.push(Token { tok, pos });
        if end {
            return Ok(tokens);
        }
    }
}

/// True for characters that may appear in an unquoted attribute name.
pub(crate) fn is_attribute_char(c: char) -> bool {
    !c.is_whitespace()
        && !matches!(
            c,
            '{' | '}' | '(' | ')' | '=' | '~' | '!' | '<' | '>' | '&' | '|' | '^' | ',' | '"' | '`'
        )
}

fn is_word_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

use weft_core::is_micro;

struct Lexer {
    chars: Vec<char>,
    i: usize,
    line: u32,
    column: u32,
}

impl Lexer {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.i).copied()
    }

    fn peek_at(&self, n: usize) -> Option<char> {
        self.chars.get(self.i + n).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.i += 1;
        if c == '\n' {
            self.line = self.line.saturating_add(1);
            self.column = 1;
        } else {
            self.column = self.column.saturating_add(1);
        }
        Some(c)
    }

    /// Consumes `c` if it is next.
    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn pos(&self) -> Pos {
        Pos {
            line: self.line,
            column: self.column,
        }
    }

    fn error<T>(&self, pos: Pos, message: impl Into<String>) -> Result<T, ParseError> {
        Err(ParseError {
            line: pos.line,
            column: pos.column,
            message: message.into(),
        })
    }

    fn token(&mut self, pos: Pos) -> Result<Tok, ParseError> {
        let Some(c) = self.peek() else {
            return Ok(Tok::Eof);
        };
        if c.is_ascii_digit() || (c == '.' && self.peek_at(1).is_some_and(|d| d.is_ascii_digit())) {
            return self.number(pos);
        }
        if is_word_start(c) {
            return self.word();
        }
        self.bump();
        let tok = match c {
            '{' => Tok::LBrace,
            '}' => Tok::RBrace,
            '(' => Tok::LParen,
            ')' => Tok::RParen,
            ',' => Tok::Comma,
            '+' => Tok::Plus,
            '-' => Tok::Minus,
            '*' => Tok::Star,
            '/' => Tok::Slash,
            '%' => Tok::Percent,
            '^' => Tok::Caret,
            '~' => Tok::Tilde,
            '|' if self.eat('|') => Tok::Or,
            '|' => Tok::Pipe,
            '=' if self.eat('~') => Tok::Re,
            '=' => Tok::Eq,
            '!' if self.eat('=') => Tok::Neq,
            '!' if self.eat('~') => Tok::Nre,
            '!' if self.eat('>') => {
                if self.eat('>') {
                    Tok::NotDesc
                } else {
                    Tok::NotChild
                }
            }
            '!' if self.eat('<') => {
                if self.eat('<') {
                    Tok::NotAnc
                } else {
                    Tok::NotParent
                }
            }
            '!' => Tok::Not,
            '>' if self.eat('=') => Tok::Gte,
            '>' if self.eat('>') => Tok::Desc,
            '>' => Tok::Gt,
            '<' if self.eat('=') => Tok::Lte,
            '<' if self.eat('<') => Tok::Anc,
            '<' => Tok::Lt,
            '&' if self.eat('&') => Tok::And,
            '&' if self.eat('~') => Tok::UnionSibling,
            '&' if self.eat('>') => {
                if self.eat('>') {
                    Tok::UnionDesc
                } else {
                    Tok::UnionChild
                }
            }
            '&' if self.eat('<') => {
                if self.eat('<') {
                    Tok::UnionAnc
                } else {
                    Tok::UnionParent
                }
            }
            '&' => return self.error(pos, "unexpected character '&' (did you mean '&&'?)"),
            '"' => Tok::Str(self.quoted(pos)?),
            '`' => Tok::Str(self.raw_string(pos)?),
            '.' => Tok::Attr(Attribute {
                scope: AttributeScope::Unscoped,
                parent: false,
                name: self.attribute_name(".")?,
            }),
            other => return self.error(pos, format!("unexpected character {other:?}")),
        };
        Ok(tok)
    }

    /// A keyword, an identifier, a colon intrinsic (`span:name`) or a scoped attribute.
    fn word(&mut self) -> Result<Tok, ParseError> {
        let mut word = String::new();
        while let Some(c) = self.peek().filter(|&c| is_word_char(c)) {
            word.push(c);
            self.bump();
        }
        if self.peek() == Some('.') {
            if let Some(scope) = AttributeScope::from_word(&word) {
                self.bump();
                let name = self.attribute_name(scope.prefix())?;
                return Ok(Tok::Attr(Attribute {
                    scope,
                    parent: false,
                    name,
                }));
            }
            if word == "parent" {
                self.bump();
                let mut scope = AttributeScope::Unscoped;
                for candidate in [AttributeScope::Resource, AttributeScope::Span] {
                    if self.starts_with(candidate.prefix()) {
                        for _ in 0..candidate.prefix().chars().count() {
                            self.bump();
                        }
                        scope = candidate;
                        break;
                    }
                }
                let after = match scope {
                    AttributeScope::Unscoped => "parent.".to_string(),
                    _ => format!("parent.{}", scope.prefix()),
                };
                let name = self.attribute_name(&after)?;
                return Ok(Tok::Attr(Attribute {
                    scope,
                    parent: true,
                    name,
                }));
            }
        }
        if self.peek() == Some(':') && self.peek_at(1).is_some_and(is_word_start) {
            self.bump();
            word.push(':');
            while let Some(c) = self.peek().filter(|&c| is_word_char(c)) {
                word.push(c);
                self.bump();
            }
        }
        Ok(Tok::Ident(word))
    }

    fn starts_with(&self, s: &str) -> bool {
        s.chars().enumerate().all(|(n, c)| self.peek_at(n) == Some(c))
    }

    /// The name after a scope prefix such as `span.`: a quoted string or a run of name characters.
    fn attribute_name(&mut self, after: &str) -> Result<String, ParseError> {
        let pos = self.pos();
        if self.eat('"') {
            let name = self.quoted(pos)?;
            if name.is_empty() {
                return self.error(pos, format!("empty attribute name after '{after}'"));
            }
            return Ok(name);
        }
        let mut name = String::new();
        while let Some(c) = self.peek().filter(|&c| is_attribute_char(c)) {
            name.push(c);
            self.bump();
        }
        if name.is_empty() {
            let found = match self.peek() {
                None => "end of query".to_string(),
                Some(c) if c.is_whitespace() => "whitespace".to_string(),
                Some(c) => format!("{c:?}"),
            };
            return self.error(
                pos,
                format!("expected an attribute name after '{after}', found {found}"),
            );
        }
        Ok(name)
    }

    /// The rest of a double-quoted string whose opening quote (at `start`) was consumed.
    fn quoted(&mut self, start: Pos) -> Result<String, ParseError> {
        let mut out = String::new();
        loop {
            let pos = self.pos();
            match self.bump() {
                None => return self.error(start, "unterminated string"),
                Some('"') => return Ok(out),
                Some('\\') => out.push(self.escape(pos)?),
                Some(c) => out.push(c),
            }
        }
    }

    /// The character an escape stands for; the backslash at `pos` was consumed.
    fn escape(&mut self, pos: Pos) -> Result<char, ParseError> {
        let Some(c) = self.bump() else {
            return self.error(pos, "unterminated string");
        };
        let c = match c {
            'n' => '\n',
            't' => '\t',
            'r' => '\r',
            '\\' => '\\',
            '"' => '"',
            '\'' => '\'',
            'a' => '\u{7}',
            'b' => '\u{8}',
            'f' => '\u{c}',
            'v' => '\u{b}',
            'x' => {
                let value = self.hex_digits(pos, 2)?;
                if value > 0x7f {
                    return self.error(
                        pos,
                        "escape '\\x' must be ASCII (at most \\x7f); use \\u for other characters",
                    );
                }
                char::from_u32(value).unwrap_or('\u{fffd}')
            }
            'u' => self.hex_char(pos, 4)?,
            'U' => self.hex_char(pos, 8)?,
            other => {
                return self.error(
                    pos,
                    format!("invalid escape '\\{other}' in string (use a backtick string for regular expressions)"),
                );
            }
        };
        Ok(c)
    }

    fn hex_digits(&mut self, pos: Pos, count: usize) -> Result<u32, ParseError> {
        let mut value: u32 = 0;
        for _ in 0..count {
            match self.peek().and_then(|c| c.to_digit(16)) {
                Some(d) => {
                    value = value * 16 + d;
                    self.bump();
                }
                None => return self.error(pos, format!("escape needs {count} hex digits")),
            }
        }
        Ok(value)
    }

    fn hex_char(&mut self, pos: Pos, count: usize) -> Result<char, ParseError> {
        let value = self.hex_digits(pos, count)?;
        match char::from_u32(value) {
            Some(c) => Ok(c),
            None => self.error(pos, format!("escape {value:#x} is not a Unicode scalar value")),
        }
    }

    /// The rest of a backtick string (no escapes) whose opening backtick was consumed.
    fn raw_string(&mut self, start: Pos) -> Result<String, ParseError> {
        let mut out = String::new();
        loop {
            match self.bump() {
                None => return self.error(start, "unterminated raw string"),
                Some('`') => return Ok(out),
                Some(c) => out.push(c),
            }
        }
    }

    /// An integer, a float (`1.5`, `.5`, `1e-3`) or a duration (`10ms`, `1.5s`, `1h30m`).
    fn number(&mut self, pos: Pos) -> Result<Tok, ParseError> {
        let mut text = String::new();
        let mut is_float = false;
        self.digits(&mut text);
        if self.peek() == Some('.') && self.peek_at(1).is_some_and(|c| c.is_ascii_digit()) {
            is_float = true;
            text.push('.');
            self.bump();
            self.digits(&mut text);
        }
        let mut has_exponent = false;
        if matches!(self.peek(), Some('e' | 'E')) {
            let digit_at = if matches!(self.peek_at(1), Some('+' | '-')) {
                2
            } else {
                1
            };
            if self.peek_at(digit_at).is_some_and(|c| c.is_ascii_digit()) {
                has_exponent = true;
                is_float = true;
                for _ in 0..digit_at {
                    text.extend(self.bump());
                }
                self.digits(&mut text);
            }
        }
        if self.peek().is_some_and(|c| c.is_alphabetic() || is_micro(c)) {
            while let Some(c) = self.peek().filter(|&c| c.is_alphanumeric() || c == '.' || is_micro(c)) {
                text.push(c);
                self.bump();
            }
            if has_exponent {
                return self.error(pos, format!("invalid number '{text}'"));
            }
            return match parse_duration(&text) {
                Ok(ns) => Ok(Tok::Duration(ns)),
                Err(why) => self.error(pos, format!("invalid duration '{text}': {why}")),
            };
        }
        if is_float {
            match text.parse::<f64>() {
                Ok(f) if f.is_finite() => Ok(Tok::Float(f)),
                _ => self.error(pos, format!("number '{text}' is out of range")),
            }
        } else {
            match text.parse::<i64>() {
                Ok(i) => Ok(Tok::Int(i)),
                Err(_) => self.error(pos, format!("integer '{text}' is out of range")),
            }
        }
    }

    fn digits(&mut self, text: &mut String) {
        while let Some(c) = self.peek().filter(char::is_ascii_digit) {
            text.push(c);
            self.bump();
        }
    }
}

/// Parses `1.5s`, `100ms`, `1h30m` into nanoseconds ([`weft_core::parse_duration`] without
/// days, as Go's `time.ParseDuration`, which Tempo uses).
pub(crate) fn parse_duration(text: &str) -> Result<i64, String> {
    let n = weft_core::parse_duration(text, false)?;
    i64::try_from(n).map_err(|_| "value is out of range".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(input: &str) -> Vec<Tok> {
        tokenize(input).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1.5s"), Ok(1_500_000_000));
        assert_eq!(parse_duration("1h30m"), Ok(5_400_000_000_000));
        assert_eq!(parse_duration("250µs"), Ok(250_000));
        assert_eq!(parse_duration("250us"), Ok(250_000));
        assert_eq!(parse_duration("1.0000000001s"), Ok(1_000_000_000));
        assert!(parse_duration("5d").unwrap_err().contains("unknown unit 'd'"));
        assert!(parse_duration("99999999999999999999h").is_err());
        assert_eq!(
            parse_duration("1h."),
            Err("expected a number after the last unit".to_string())
        );
    }

    #[test]
    fn attributes_are_one_token() {
        assert_eq!(
            toks("span.http.request.method=\"GET\""),
            vec![
                Tok::Attr(Attribute {
                    scope: AttributeScope::Span,
                    parent: false,
                    name: "http.request.method".into()
                }),
                Tok::Eq,
                Tok::Str("GET".into()),
                Tok::Eof
            ]
        );
        assert_eq!(
            toks("parent.span.x parent.spanner"),
            vec![
                Tok::Attr(Attribute {
                    scope: AttributeScope::Span,
                    parent: true,
                    name: "x".into()
                }),
                Tok::Attr(Attribute {
                    scope: AttributeScope::Unscoped,
                    parent: true,
                    name: "spanner".into()
                }),
                Tok::Eof
            ]
        );
    }

    #[test]
    fn numbers_and_operators() {
        assert_eq!(
            toks(".5 1e3 7 2m !>> &~ !~"),
            vec![
                Tok::Float(0.5),
                Tok::Float(1000.0),
                Tok::Int(7),
                Tok::Duration(120_000_000_000),
                Tok::NotDesc,
                Tok::UnionSibling,
                Tok::Nre,
                Tok::Eof
            ]
        );
    }

    #[test]
    fn positions_are_one_based_characters() {
        let tokens = tokenize("{\n  µ").unwrap_err();
        assert_eq!((tokens.line, tokens.column), (2, 3));
        let tokens = tokenize("\"é\" }").unwrap();
        assert_eq!(tokens[1].pos, Pos { line: 1, column: 5 });
    }
}

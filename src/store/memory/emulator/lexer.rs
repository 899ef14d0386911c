//! Reads DynamoDB expressions: splits them into tokens, and walks the tokens with a cursor
//! that resolves `#name` and `:value` placeholders and refuses reserved words as bare names.

use std::collections::BTreeMap;
use std::fmt;

use super::ast::{ExpressionError, Path, PathElement};
use crate::store::{Attr, Item};

/// Operator symbols, longest first so `<=` is not read as `<`.
const SYMBOLS: [&str; 14] = [
    "<>", "<=", ">=", "(", ")", "[", "]", ",", ".", "=", "<", ">", "+", "-",
];

/// A lexical token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Token {
    /// A bare word: a keyword, a function or an attribute name.
    Word(String),
    /// `#name`, with its `#`.
    Name(String),
    /// `:value`, with its `:`.
    Value(String),
    /// Digits (a list index).
    Digits(String),
    /// Punctuation or an operator.
    Symbol(&'static str),
    /// The end of the expression.
    End,
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Word(text) | Self::Name(text) | Self::Value(text) | Self::Digits(text) => {
                write!(f, "{text:?}")
            }
            Self::Symbol(symbol) => write!(f, "{symbol:?}"),
            Self::End => f.write_str("the end of the expression"),
        }
    }
}

/// Splits an expression into tokens, each with the byte offset it starts at.
pub(crate) fn tokenize(expression: &str) -> Result<Vec<(usize, Token)>, ExpressionError> {
    let bytes = expression.as_bytes();
    let run = |from: usize, accept: fn(&u8) -> bool| {
        from + bytes.iter().skip(from).take_while(|b| accept(b)).count()
    };
    let word_byte: fn(&u8) -> bool = |b| b.is_ascii_alphanumeric() || *b == b'_';
    let text = |from: usize, to: usize| expression.get(from..to).unwrap_or_default().to_owned();
    let (mut tokens, mut at) = (Vec::new(), 0);
    while let Some(&byte) = bytes.get(at) {
        let (token, end) = match byte {
            b if b.is_ascii_whitespace() => {
                at += 1;
                continue;
            }
            b if b.is_ascii_alphabetic() => {
                let end = run(at, word_byte);
                (Token::Word(text(at, end)), end)
            }
            b if b.is_ascii_digit() => {
                let end = run(at, u8::is_ascii_digit);
                (Token::Digits(text(at, end)), end)
            }
            b'#' | b':' if run(at + 1, word_byte) > at + 1 => {
                let end = run(at + 1, word_byte);
                let placeholder = text(at, end);
                let token = if byte == b'#' {
                    Token::Name(placeholder)
                } else {
                    Token::Value(placeholder)
                };
                (token, end)
            }
            _ => match SYMBOLS.iter().find(|s| {
                expression
                    .get(at..)
                    .is_some_and(|rest| rest.starts_with(**s))
            }) {
                Some(&symbol) => (Token::Symbol(symbol), at + symbol.len()),
                None => {
                    let found = expression.get(at..).and_then(|rest| rest.chars().next());
                    let found = format!("{:?}", found.unwrap_or(char::REPLACEMENT_CHARACTER));
                    return Err(ExpressionError::Syntax {
                        position: at,
                        expected: "a token",
                        found,
                    });
                }
            },
        };
        tokens.push((at, token));
        at = end;
    }
    tokens.push((expression.len(), Token::End));
    Ok(tokens)
}

/// The longest expression DynamoDB accepts, in bytes.
const MAX_LENGTH: usize = 4096;
/// Deepest nesting of parentheses and functions this parser accepts.
const MAX_DEPTH: usize = 64;

/// The reserved words, as listed at
/// <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ReservedWords.html>.
const RESERVED_WORDS: &str = "\
    ABORT ABSOLUTE ACTION ADD AFTER AGENT AGGREGATE ALL ALLOCATE ALTER ANALYZE AND ANY ARCHIVE \
    ARE ARRAY AS ASC ASCII ASENSITIVE ASSERTION ASYMMETRIC AT ATOMIC ATTACH ATTRIBUTE AUTH \
    AUTHORIZATION AUTHORIZE AUTO AVG BACK BACKUP BASE BATCH BEFORE BEGIN BETWEEN BIGINT BINARY \
    BIT BLOB BLOCK BOOLEAN BOTH BREADTH BUCKET BULK BY BYTE CALL CALLED CALLING CAPACITY \
    CASCADE CASCADED CASE CAST CATALOG CHAR CHARACTER CHECK CLASS CLOB CLOSE CLUSTER CLUSTERED \
    CLUSTERING CLUSTERS COALESCE COLLATE COLLATION COLLECTION COLUMN COLUMNS COMBINE COMMENT \
    COMMIT COMPACT COMPILE COMPRESS CONDITION CONFLICT CONNECT CONNECTION CONSISTENCY \
    CONSISTENT CONSTRAINT CONSTRAINTS CONSTRUCTOR CONSUMED CONTINUE CONVERT COPY CORRESPONDING \
    COUNT COUNTER CREATE CROSS CUBE CURRENT CURSOR CYCLE DATA DATABASE DATE DATETIME DAY \
    DEALLOCATE DEC DECIMAL DECLARE DEFAULT DEFERRABLE DEFERRED DEFINE DEFINED DEFINITION \
    DELETE DELIMITED DEPTH DEREF DESC DESCRIBE DESCRIPTOR DETACH DETERMINISTIC DIAGNOSTICS \
    DIRECTORIES DISABLE DISCONNECT DISTINCT DISTRIBUTE DO DOMAIN DOUBLE DROP DUMP DURATION \
    DYNAMIC EACH ELEMENT ELSE ELSEIF EMPTY ENABLE END EQUAL EQUALS ERROR ESCAPE ESCAPED EVAL \
    EVALUATE EXCEEDED EXCEPT EXCEPTION EXCEPTIONS EXCLUSIVE EXEC EXECUTE EXISTS EXIT EXPLAIN \
    EXPLODE EXPORT EXPRESSION EXTENDED EXTERNAL EXTRACT FAIL FALSE FAMILY FETCH FIELDS FILE \
    FILTER FILTERING FINAL FINISH FIRST FIXED FLATTERN FLOAT FOR FORCE FOREIGN FORMAT FORWARD \
    FOUND FREE FROM FULL FUNCTION FUNCTIONS GENERAL GENERATE GET GLOB GLOBAL GO GOTO GRANT \
    GREATER GROUP GROUPING HANDLER HASH HAVE HAVING HEAP HIDDEN HOLD HOUR IDENTIFIED IDENTITY \
    IF IGNORE IMMEDIATE IMPORT IN INCLUDING INCLUSIVE INCREMENT INCREMENTAL INDEX INDEXED \
    INDEXES INDICATOR INFINITE INITIALLY INLINE INNER INNTER INOUT INPUT INSENSITIVE INSERT \
    INSTEAD INT INTEGER INTERSECT INTERVAL INTO INVALIDATE IS ISOLATION ITEM ITEMS ITERATE \
    JOIN KEY KEYS LAG LANGUAGE LARGE LAST LATERAL LEAD LEADING LEAVE LEFT LENGTH LESS LEVEL \
    LIKE LIMIT LIMITED LINES LIST LOAD LOCAL LOCALTIME LOCALTIMESTAMP LOCATION LOCATOR LOCK \
    LOCKS LOG LOGED LONG LOOP LOWER MAP MATCH MATERIALIZED MAX MAXLEN MEMBER MERGE METHOD \
    METRICS MIN MINUS MINUTE MISSING MOD MODE MODIFIES MODIFY MODULE MONTH MULTI MULTISET NAME \
    NAMES NATIONAL NATURAL NCHAR NCLOB NEW NEXT NO NONE NOT NULL NULLIF NUMBER NUMERIC OBJECT \
    OF OFFLINE OFFSET OLD ON ONLINE ONLY OPAQUE OPEN OPERATOR OPTION OR ORDER ORDINALITY OTHER \
    OTHERS OUT OUTER OUTPUT OVER OVERLAPS OVERRIDE OWNER PAD PARALLEL PARAMETER PARAMETERS \
    PARTIAL PARTITION PARTITIONED PARTITIONS PATH PERCENT PERCENTILE PERMISSION PERMISSIONS \
    PIPE PIPELINED PLAN POOL POSITION PRECISION PREPARE PRESERVE PRIMARY PRIOR PRIVATE \
    PRIVILEGES PROCEDURE PROCESSED PROJECT PROJECTION PROPERTY PROVISIONING PUBLIC PUT QUERY \
    QUIT QUORUM RAISE RANDOM RANGE RANK RAW READ READS REAL REBUILD RECORD RECURSIVE REDUCE \
    REF REFERENCE REFERENCES REFERENCING REGEXP REGION REINDEX RELATIVE RELEASE REMAINDER \
    RENAME REPEAT REPLACE REQUEST RESET RESIGNAL RESOURCE RESPONSE RESTORE RESTRICT RESULT \
    RETURN RETURNING RETURNS REVERSE REVOKE RIGHT ROLE ROLES ROLLBACK ROLLUP ROUTINE ROW ROWS \
    RULE RULES SAMPLE SATISFIES SAVE SAVEPOINT SCAN SCHEMA SCOPE SCROLL SEARCH SECOND SECTION \
    SEGMENT SEGMENTS SELECT SELF SEMI SENSITIVE SEPARATE SEQUENCE SERIALIZABLE SESSION SET \
    SETS SHARD SHARE SHARED SHORT SHOW SIGNAL SIMILAR SIZE SKEWED SMALLINT SNAPSHOT SOME \
    SOURCE SPACE SPACES SPARSE SPECIFIC SPECIFICTYPE SPLIT SQL SQLCODE SQLERROR SQLEXCEPTION \
    SQLSTATE SQLWARNING START STATE STATIC STATUS STORAGE STORE STORED STREAM STRING STRUCT \
    STYLE SUB SUBMULTISET SUBPARTITION SUBSTRING SUBTYPE SUM SUPER SYMMETRIC SYNONYM SYSTEM \
    TABLE TABLESAMPLE TEMP TEMPORARY TERMINATED TEXT THAN THEN THROUGHPUT TIME TIMESTAMP \
    TIMEZONE TINYINT TO TOKEN TOTAL TOUCH TRAILING TRANSACTION TRANSFORM TRANSLATE TRANSLATION \
    TREAT TRIGGER TRIM TRUE TRUNCATE TTL TUPLE TYPE UNDER UNDO UNION UNIQUE UNIT UNKNOWN \
    UNLOGGED UNNEST UNPROCESSED UNSIGNED UNTIL UPDATE UPPER URL USAGE USE USER USERS USING \
    UUID VACUUM VALUE VALUED VALUES VARCHAR VARIABLE VARIANCE VARINT VARYING VIEW VIEWS \
    VIRTUAL VOID WAIT WHEN WHENEVER WHERE WHILE WINDOW WITH WITHIN WITHOUT WORK WRAPPED WRITE \
    YEAR ZONE";

/// Whether `word` is a reserved word (the list is case-insensitive).
fn is_reserved(word: &str) -> bool {
    RESERVED_WORDS
        .split_ascii_whitespace()
        .any(|reserved| reserved.eq_ignore_ascii_case(word))
}

/// A cursor over one expression's tokens that resolves placeholders as it reads them.
#[derive(Debug)]
pub(crate) struct TokenStream<'a> {
    /// The tokens, ending with [`Token::End`].
    tokens: Vec<(usize, Token)>,
    /// The index of the next token (never past [`Token::End`]).
    next: usize,
    /// `#name` placeholders.
    names: &'a BTreeMap<String, String>,
    /// `:value` placeholders.
    values: &'a Item,
    /// The current nesting depth.
    depth: usize,
    /// The token indexes of the last group of parentheses read: `(` and `)`.
    last_group: Option<(usize, usize)>,
}

impl<'a> TokenStream<'a> {
    /// A cursor at the start of `expression`.
    pub(crate) fn new(
        expression: &str,
        names: &'a BTreeMap<String, String>,
        values: &'a Item,
    ) -> Result<Self, ExpressionError> {
        if expression.trim().is_empty() {
            return Err(ExpressionError::Empty);
        }
        if expression.len() > MAX_LENGTH {
            let size = expression.len();
            let message = "Expression size has exceeded the maximum allowed size";
            return Err(ExpressionError::Invalid(format!(
                "{message}; expression size: {size}"
            )));
        }
        let tokens = tokenize(expression)?;
        Ok(Self {
            tokens,
            next: 0,
            names,
            values,
            depth: 0,
            last_group: None,
        })
    }

    /// The token `ahead` tokens after the next one.
    pub(crate) fn peek(&self, ahead: usize) -> &Token {
        self.tokens
            .get(self.next + ahead)
            .map_or(&Token::End, |(_, token)| token)
    }

    /// Consumes the next token.
    pub(crate) fn advance(&mut self) -> Token {
        let token = self.peek(0).clone();
        self.next = (self.next + 1).min(self.tokens.len().saturating_sub(1));
        token
    }

    /// A syntax error at the next token.
    pub(crate) fn error(&self, expected: &'static str) -> ExpressionError {
        let position = self
            .tokens
            .get(self.next)
            .map_or(0, |(position, _)| *position);
        ExpressionError::Syntax {
            position,
            expected,
            found: self.peek(0).to_string(),
        }
    }

    /// Consumes the next token if it is the symbol or keyword (in any case) `text`.
    pub(crate) fn eat(&mut self, text: &str) -> bool {
        let found = match self.peek(0) {
            Token::Symbol(symbol) => *symbol == text,
            Token::Word(word) => word.eq_ignore_ascii_case(text),
            _ => false,
        };
        if found {
            self.advance();
        }
        found
    }

    /// Consumes the symbol or keyword `text`, or fails.
    pub(crate) fn expect(&mut self, text: &'static str) -> Result<(), ExpressionError> {
        if self.eat(text) {
            Ok(())
        } else {
            Err(self.error(text))
        }
    }

    /// The function name when the next tokens are `name(`.
    pub(crate) fn function(&self) -> Option<String> {
        match (self.peek(0), self.peek(1)) {
            (Token::Word(name), Token::Symbol("(")) => Some(name.clone()),
            _ => None,
        }
    }

    /// Runs `parse` one nesting level deeper.
    pub(crate) fn nested<T>(
        &mut self,
        parse: impl FnOnce(&mut Self) -> Result<T, ExpressionError>,
    ) -> Result<T, ExpressionError> {
        if self.depth >= MAX_DEPTH {
            return Err(ExpressionError::Unsupported(
                "expressions nested more than 64 levels deep",
            ));
        }
        self.depth += 1;
        let parsed = parse(self);
        self.depth -= 1;
        parsed
    }

    /// Fails unless every token was consumed.
    pub(crate) fn finish(&self) -> Result<(), ExpressionError> {
        if *self.peek(0) == Token::End {
            Ok(())
        } else {
            Err(self.error("the end of the expression"))
        }
    }

    /// A `:value`, resolved.
    pub(crate) fn value(&mut self) -> Result<Attr, ExpressionError> {
        let Token::Value(placeholder) = self.peek(0).clone() else {
            return Err(self.error("an expression attribute value"));
        };
        self.advance();
        self.values
            .get(&placeholder)
            .cloned()
            .ok_or(ExpressionError::UndefinedPlaceholder(placeholder))
    }

    /// An attribute name or map key: a bare word or a `#name`, resolved.
    fn attribute_name(&mut self) -> Result<String, ExpressionError> {
        let name = match self.peek(0).clone() {
            Token::Word(word) if is_reserved(&word) => Err(ExpressionError::ReservedWord(word)),
            Token::Word(word) => Ok(word),
            Token::Name(placeholder) => self
                .names
                .get(&placeholder)
                .cloned()
                .ok_or(ExpressionError::UndefinedPlaceholder(placeholder)),
            Token::Value(_) => Err(ExpressionError::Invalid(
                "Operator or function requires a document path".into(),
            )),
            _ => Err(self.error("an attribute name")),
        }?;
        self.advance();
        Ok(name)
    }

    /// A document path: a name, then `.name`s and `[index]`es.
    pub(crate) fn path(&mut self) -> Result<Path, ExpressionError> {
        let mut elements = vec![PathElement::Name(self.attribute_name()?)];
        loop {
            if self.eat(".") {
                elements.push(PathElement::Name(self.attribute_name()?));
            } else if self.eat("[") {
                let Token::Digits(digits) = self.peek(0).clone() else {
                    return Err(self.error("a list index"));
                };
                let index = digits.parse().map_err(|_| {
                    ExpressionError::Invalid(format!("List index {digits} is too large"))
                })?;
                self.advance();
                self.expect("]")?;
                elements.push(PathElement::Index(index));
            } else {
                return Ok(Path(elements));
            }
        }
    }

    /// Parses with `first` or, if that fails, from the same token with `second`; if both fail,
    /// the error of the attempt that read further.
    pub(crate) fn either<T>(
        &mut self,
        first: impl FnOnce(&mut Self) -> Result<T, ExpressionError>,
        second: impl FnOnce(&mut Self) -> Result<T, ExpressionError>,
    ) -> Result<T, ExpressionError> {
        let start = (self.next, self.last_group);
        let first_error = match first(self) {
            Ok(parsed) => return Ok(parsed),
            Err(error) => (self.next, error),
        };
        (self.next, self.last_group) = start;
        second(self).map_err(|error| {
            if self.next > first_error.0 {
                error
            } else {
                first_error.1
            }
        })
    }

    /// `(inner)`, refusing redundant parentheses `((...))` as DynamoDB does.
    pub(crate) fn parenthesized<T>(
        &mut self,
        inner: impl FnOnce(&mut Self) -> Result<T, ExpressionError>,
    ) -> Result<T, ExpressionError> {
        let open = self.next;
        self.expect("(")?;
        let parsed = self.nested(inner)?;
        self.expect(")")?;
        let close = self.next.saturating_sub(1);
        if self.last_group == Some((open + 1, close.saturating_sub(1))) {
            let message = "The expression has redundant parentheses";
            return Err(ExpressionError::Invalid(message.into()));
        }
        self.last_group = Some((open, close));
        Ok(parsed)
    }
}

//! DynamoDB condition and update expressions, parsed into syntax trees with the checks
//! DynamoDB makes before it reads an item: grammar, placeholders, reserved words, the types
//! of `:value` operands, and overlapping update paths. [`super::evaluate`] runs the trees.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::decimal::NumberError;
use super::lexer::{tokenize, Token, TokenStream};
use super::parser;
use crate::write::{Attr, Item};

/// Why DynamoDB refuses an expression (each is a ValidationException).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ExpressionError {
    /// The expression is empty.
    Empty,
    /// The text breaks the grammar.
    Syntax {
        /// The byte offset of the offending token.
        position: usize,
        /// What the grammar expected there.
        expected: &'static str,
        /// The token found instead.
        found: String,
    },
    /// A `#name` or `:value` placeholder is used but not defined.
    UndefinedPlaceholder(String),
    /// A defined placeholder is used by none of the write's expressions.
    UnusedPlaceholder(String),
    /// A bare attribute name is one of DynamoDB's reserved words.
    ReservedWord(String),
    /// Well formed but refused: a function misused, a `:value` of the wrong type, ...
    Invalid(String),
    /// An operand has the wrong type for the item's data (e.g. `ADD` to a string).
    Type(String),
    /// An update reads an attribute the item does not have.
    MissingAttribute(String),
    /// A document path does not lead into the item's maps and lists.
    InvalidPath(String),
    /// A number DynamoDB cannot store.
    Number(NumberError),
    /// Syntax this in-memory evaluator does not implement.
    Unsupported(&'static str),
}

impl fmt::Display for ExpressionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("The expression can not be empty"),
            Self::Syntax {
                position,
                expected,
                found,
            } => {
                write!(
                    f,
                    "Syntax error at byte {position}: expected {expected}, found {found}"
                )
            }
            Self::UndefinedPlaceholder(p) if p.starts_with('#') => write!(
                f,
                "An expression attribute name used in the document path is not defined; \
                 attribute name: {p}"
            ),
            Self::UndefinedPlaceholder(p) => write!(
                f,
                "An expression attribute value used in expression is not defined; \
                 attribute value: {p}"
            ),
            Self::UnusedPlaceholder(p) => {
                let kind = if p.starts_with('#') {
                    "Names"
                } else {
                    "Values"
                };
                let message = "unused in expressions: keys:";
                write!(
                    f,
                    "Value provided in ExpressionAttribute{kind} {message} {{{p}}}"
                )
            }
            Self::ReservedWord(word) => write!(
                f,
                "Attribute name is a reserved keyword; reserved keyword: {word}"
            ),
            Self::Invalid(reason) => f.write_str(reason),
            Self::Type(what) => write!(
                f,
                "An operand in the update expression has an incorrect data type: {what}"
            ),
            Self::MissingAttribute(path) => write!(
                f,
                "The provided expression refers to an attribute that does not exist in the \
                 item: {path}"
            ),
            Self::InvalidPath(path) => write!(
                f,
                "The document path provided in the update expression is invalid for update: {path}"
            ),
            Self::Number(error) => error.fmt(f),
            Self::Unsupported(what) => write!(f, "Not supported by the in-memory store: {what}"),
        }
    }
}

impl std::error::Error for ExpressionError {}

/// One step of a document path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum PathElement {
    /// A top-level attribute or a map key.
    Name(String),
    /// A list index.
    Index(usize),
}

/// A document path: an attribute name, then map keys (`.key`) and list indexes (`[0]`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Path(pub(crate) Vec<PathElement>);

impl Path {
    /// The top-level attribute the path starts at.
    pub(crate) fn attribute(&self) -> Option<&str> {
        match self.0.first() {
            Some(PathElement::Name(name)) => Some(name),
            _ => None,
        }
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, element) in self.0.iter().enumerate() {
            match element {
                PathElement::Name(name) if i == 0 => f.write_str(name)?,
                PathElement::Name(name) => write!(f, ".{name}")?,
                PathElement::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// An operand of a condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Operand {
    /// The attribute at a path (absent when the item lacks it).
    Path(Path),
    /// A `:value`.
    Value(Attr),
    /// `size(...)` of a path or value.
    Size(Box<Operand>),
}

impl Operand {
    /// The value, when the operand is a `:value`.
    pub(crate) fn value(&self) -> Option<&Attr> {
        match self {
            Self::Value(value) => Some(value),
            _ => None,
        }
    }

    /// The path, when the operand is a path.
    pub(crate) fn path(&self) -> Option<&Path> {
        match self {
            Self::Path(path) => Some(path),
            _ => None,
        }
    }
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Comparator {
    /// `=`
    Equal,
    /// `<>`
    NotEqual,
    /// `<`
    Less,
    /// `<=`
    LessOrEqual,
    /// `>`
    Greater,
    /// `>=`
    GreaterOrEqual,
}

/// A parsed condition expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Condition {
    /// `a <comparator> b`
    Compare(Comparator, Operand, Operand),
    /// `a BETWEEN low AND high`
    Between(Operand, Operand, Operand),
    /// `a IN (b, c, ...)`
    In(Operand, Vec<Operand>),
    /// `attribute_exists(path)`
    Exists(Path),
    /// `attribute_not_exists(path)`
    NotExists(Path),
    /// `attribute_type(path, :type)`, with the type name.
    HasType(Path, String),
    /// `begins_with(a, :prefix)`
    BeginsWith(Operand, Operand),
    /// `contains(a, b)`
    Contains(Operand, Operand),
    /// `NOT c`
    Not(Box<Condition>),
    /// `a AND b`
    And(Box<Condition>, Box<Condition>),
    /// `a OR b`
    Or(Box<Condition>, Box<Condition>),
}

/// The right-hand side of a `SET` action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SetValue {
    /// The attribute at a path (an error when missing).
    Path(Path),
    /// A `:value`.
    Value(Attr),
    /// `if_not_exists(path, value)`
    IfNotExists(Path, Box<SetValue>),
    /// `list_append(a, b)`
    ListAppend(Box<SetValue>, Box<SetValue>),
    /// `a + b`
    Plus(Box<SetValue>, Box<SetValue>),
    /// `a - b`
    Minus(Box<SetValue>, Box<SetValue>),
}

impl SetValue {
    /// The path, when the operand is a path.
    pub(crate) fn path(&self) -> Option<&Path> {
        match self {
            Self::Path(path) => Some(path),
            _ => None,
        }
    }
}

/// A parsed update expression: its actions by clause.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct UpdateExpression {
    /// `SET path = value` actions.
    pub(crate) set: Vec<(Path, SetValue)>,
    /// `REMOVE path` actions.
    pub(crate) remove: Vec<Path>,
    /// `ADD path :value` actions.
    pub(crate) add: Vec<(Path, Attr)>,
    /// `DELETE path :set` actions.
    pub(crate) delete: Vec<(Path, Attr)>,
}

impl UpdateExpression {
    /// Every path the update writes.
    pub(crate) fn targets(&self) -> impl Iterator<Item = &Path> {
        let set = self.set.iter().map(|(path, _)| path);
        let add_delete = self.add.iter().chain(&self.delete).map(|(path, _)| path);
        set.chain(&self.remove).chain(add_delete)
    }
}

/// The placeholders a set of expressions mentions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Placeholders {
    /// `#name` placeholders.
    pub(crate) names: BTreeSet<String>,
    /// `:value` placeholders.
    pub(crate) values: BTreeSet<String>,
}

/// The placeholders `expressions` mention, or the first one's syntax error.
pub(crate) fn placeholders_used(expressions: &[&str]) -> Result<Placeholders, ExpressionError> {
    let mut used = Placeholders::default();
    for expression in expressions {
        for (_, token) in tokenize(expression)? {
            match token {
                Token::Name(name) => used.names.insert(name),
                Token::Value(value) => used.values.insert(value),
                _ => false,
            };
        }
    }
    Ok(used)
}

/// Checks that the placeholders `expressions` use are exactly those `names` and `values` define.
pub(crate) fn check_placeholders(
    expressions: &[&str],
    names: &BTreeMap<String, String>,
    values: &Item,
) -> Result<(), ExpressionError> {
    let used = placeholders_used(expressions)?;
    let undefined = (used.names.iter().find(|n| !names.contains_key(*n)))
        .or_else(|| used.values.iter().find(|v| !values.contains_key(*v)));
    if let Some(placeholder) = undefined {
        return Err(ExpressionError::UndefinedPlaceholder(placeholder.clone()));
    }
    let unused = (names.keys().find(|n| !used.names.contains(*n)))
        .or_else(|| values.keys().find(|v| !used.values.contains(*v)));
    unused.map_or(Ok(()), |p| {
        Err(ExpressionError::UnusedPlaceholder(p.clone()))
    })
}

/// Parses a condition expression, resolving its placeholders through `names` and `values`.
pub(crate) fn parse_condition(
    expression: &str,
    names: &BTreeMap<String, String>,
    values: &Item,
) -> Result<Condition, ExpressionError> {
    let mut tokens = TokenStream::new(expression, names, values)?;
    let condition = parser::or_condition(&mut tokens)?;
    tokens.finish()?;
    Ok(condition)
}

/// Parses an update expression, resolving its placeholders through `names` and `values`.
pub(crate) fn parse_update(
    expression: &str,
    names: &BTreeMap<String, String>,
    values: &Item,
) -> Result<UpdateExpression, ExpressionError> {
    let mut tokens = TokenStream::new(expression, names, values)?;
    let update = parser::update(&mut tokens)?;
    let targets: Vec<&Path> = update.targets().collect();
    for (i, first) in targets.iter().enumerate() {
        let overlapping = targets
            .iter()
            .skip(i + 1)
            .find(|second| first.0.iter().zip(&second.0).all(|(a, b)| a == b));
        if let Some(second) = overlapping {
            return Err(ExpressionError::Invalid(format!(
                "Two document paths overlap with each other; must remove or rewrite one of \
                 these paths; path one: [{first}], path two: [{second}]"
            )));
        }
    }
    Ok(update)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `#name` placeholders the tests use.
    fn names() -> BTreeMap<String, String> {
        [("#b", "balance"), ("#k", "key")]
            .map(|(p, n)| (p.into(), n.into()))
            .into()
    }

    /// The `:value` placeholders the tests use.
    fn values() -> Item {
        [(":a", Attr::n(1)), (":s", Attr::s("x"))]
            .map(|(p, v)| (p.into(), v))
            .into()
    }

    #[test]
    fn every_placeholder_must_be_defined_and_used() {
        let (names, values) = (names(), values());
        let undefined = |p: &str| Some(ExpressionError::UndefinedPlaceholder(p.into()));
        let unused = |p: &str| Some(ExpressionError::UnusedPlaceholder(p.into()));
        let cases: [(&[&str], _); 6] = [
            (&["SET #b = :a", "#k = :s"], None),
            (&["SET #b = :a, #x = :s", "#k = :s"], undefined("#x")),
            (&["SET #b = :zz", "#k = :s"], undefined(":zz")),
            (&["SET #b = :a", "attribute_exists(#k)"], unused(":s")),
            (&["SET x = :a, y = :s"], unused("#b")),
            (&[], unused("#b")),
        ];
        for (expressions, expected) in cases {
            let checked = check_placeholders(expressions, &names, &values);
            assert_eq!(checked.err(), expected, "{expressions:?}");
        }
        assert_eq!(
            check_placeholders(&[], &BTreeMap::new(), &Item::new()),
            Ok(())
        );
        let used = placeholders_used(&["a = :v AND #n <> :w", ":v = :v"]).unwrap();
        assert_eq!(used.names, BTreeSet::from(["#n".to_owned()]));
        assert_eq!(used.values, BTreeSet::from([":v".into(), ":w".into()]));
        assert!(placeholders_used(&["a = !"]).is_err());
        let condition = parse_condition("#nope = :a", &names, &values);
        assert_eq!(condition.err(), undefined("#nope"));
        let message = unused("#b").map(|e| e.to_string()).unwrap_or_default();
        assert!(message.ends_with("ExpressionAttributeNames unused in expressions: keys: {#b}"));
    }

    /// The parsed condition's logical structure, its comparisons shown by their left path.
    fn shape(text: &str) -> String {
        /// `condition` rendered with `&`, `|` and `!`.
        fn render(condition: &Condition) -> String {
            match condition {
                Condition::And(a, b) => format!("({} & {})", render(a), render(b)),
                Condition::Or(a, b) => format!("({} | {})", render(a), render(b)),
                Condition::Not(a) => format!("!{}", render(a)),
                Condition::Compare(_, Operand::Path(path), _) => path.to_string(),
                other => format!("{other:?}"),
            }
        }
        let parsed = parse_condition(text, &names(), &values());
        parsed.map_or_else(|error| error.to_string(), |c| render(&c))
    }

    #[test]
    fn not_binds_tighter_than_and_which_binds_tighter_than_or() {
        assert_eq!(shape("a = :s OR b = :s AND c = :s"), "(a | (b & c))");
        assert_eq!(shape("a = :s AND b = :s OR c = :s"), "((a & b) | c)");
        assert_eq!(shape("NOT a = :s AND b = :s"), "(!a & b)");
        assert_eq!(shape("not (a = :s or b = :s) and c = :s"), "(!(a | b) & c)");
        assert_eq!(shape("(a = :s OR b = :s) AnD c = :s"), "((a | b) & c)");
        assert_eq!(shape("a = :s OR NOT NOT b=:s"), "(a | !!b)");
        assert_eq!(shape("a.#k[2].c <> :s"), "a.key[2].c");
    }

    #[test]
    fn update_paths_may_not_overlap() {
        let update = |text: &str| parse_update(text, &names(), &values());
        for text in [
            "SET a = :a REMOVE a",
            "SET a.b = :a, a = :a",
            "ADD #b :a SET balance = :a",
        ] {
            assert!(
                matches!(update(text), Err(ExpressionError::Invalid(m)) if m.contains("overlap"))
            );
        }
        let parsed = update("SET a[0] = :a, a[1] = :a REMOVE b.c, b.d ADD #b :a DELETE e :s");
        assert!(matches!(parsed, Err(ExpressionError::Invalid(m)) if m.contains("DELETE")));
        let parsed = update("set a[0] = :a, a[1] = :a remove b.c, b.d add #b :a").unwrap();
        let targets: Vec<String> = parsed.targets().map(Path::to_string).collect();
        assert_eq!(targets, ["a[0]", "a[1]", "b.c", "b.d", "balance"]);
    }
}

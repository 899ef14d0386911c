//! The syntax trees of DynamoDB condition and update expressions, and why an expression is
//! refused ([`ExpressionError`]).

use std::fmt;

use super::decimal::NumberError;
use crate::store::Attr;

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

//! A recursive-descent parser for DynamoDB condition and update expressions, making the
//! checks DynamoDB makes before it reads an item: placeholders defined, no reserved word as
//! a bare name, `:value` operands of a type the operator takes, operands distinct.

use std::collections::{BTreeMap, BTreeSet};

use super::ast::{
    Comparator, Condition, ExpressionError, Operand, Path, SetValue, UpdateExpression,
};
use super::document::{
    check_distinct, check_type, operand_type, scalar_order, set_value_type, type_name,
};
use super::lexer::{Token, TokenStream};
use crate::store::{Attr, Item};

/// What parsing gives: a parsed part, or why DynamoDB refuses the expression.
type Parsed<T> = Result<T, ExpressionError>;

/// Most operands DynamoDB accepts in an `IN` list.
const MAX_IN_OPERANDS: usize = 100;
/// The type names `attribute_type` accepts.
const TYPE_NAMES: [&str; 10] = ["S", "N", "B", "BOOL", "NULL", "L", "M", "SS", "NS", "BS"];
/// The functions that are conditions.
const CONDITION_FUNCTIONS: &str =
    "attribute_exists attribute_not_exists attribute_type begins_with contains";
/// The comparison operators.
const COMPARATORS: [(&str, Comparator); 6] = [
    ("=", Comparator::Equal),
    ("<>", Comparator::NotEqual),
    ("<", Comparator::Less),
    ("<=", Comparator::LessOrEqual),
    (">", Comparator::Greater),
    (">=", Comparator::GreaterOrEqual),
];
/// The types that order: strings, numbers, binary.
const SCALARS: &[&str] = &["S", "N", "B"];

/// Whether `name` is a function that is a condition.
fn is_condition_function(name: &str) -> bool {
    CONDITION_FUNCTIONS.split(' ').any(|f| f == name)
}

/// A [`ExpressionError::Invalid`] with `message`.
fn invalid(message: impl Into<String>) -> ExpressionError {
    ExpressionError::Invalid(message.into())
}

/// `condition (OR condition)*`: the lowest precedence.
pub(crate) fn or_condition(tokens: &mut TokenStream<'_>) -> Parsed<Condition> {
    let mut left = and_condition(tokens)?;
    while tokens.eat("OR") {
        left = Condition::Or(Box::new(left), Box::new(and_condition(tokens)?));
    }
    Ok(left)
}

/// `condition (AND condition)*`
fn and_condition(tokens: &mut TokenStream<'_>) -> Parsed<Condition> {
    let mut left = not_condition(tokens)?;
    while tokens.eat("AND") {
        left = Condition::And(Box::new(left), Box::new(not_condition(tokens)?));
    }
    Ok(left)
}

/// `NOT condition`, `(condition)`, a function or a comparison (whose first operand may be
/// parenthesized too: `(a) = :v`). `NOT`s are counted, not recursed into.
fn not_condition(tokens: &mut TokenStream<'_>) -> Parsed<Condition> {
    let mut negations = 0;
    while tokens.eat("NOT") {
        negations += 1;
    }
    let mut condition = tokens.nested(|tokens| {
        if *tokens.peek(0) == Token::Symbol("(") {
            return tokens.either(|tokens| tokens.parenthesized(or_condition), comparison);
        }
        match tokens.function() {
            Some(name) if is_condition_function(&name) => function_condition(tokens, &name),
            _ => comparison(tokens),
        }
    })?;
    for _ in 0..negations {
        condition = Condition::Not(Box::new(condition));
    }
    Ok(condition)
}

/// `attribute_exists(path)`, `attribute_not_exists(path)`, `attribute_type(path, :t)`,
/// `begins_with(a, b)` or `contains(a, b)`.
fn function_condition(tokens: &mut TokenStream<'_>, name: &str) -> Parsed<Condition> {
    tokens.advance();
    tokens.expect("(")?;
    let subject = operand(tokens)?;
    let path = subject.path().cloned();
    let path = || {
        path.clone()
            .ok_or_else(|| invalid("Operator or function requires a document path"))
    };
    let condition = match name {
        "attribute_exists" => Condition::Exists(path()?),
        "attribute_not_exists" => Condition::NotExists(path()?),
        "attribute_type" => {
            let path = path()?;
            tokens.expect(",")?;
            let type_operand = operand(tokens)?;
            check_type(operand_type(&type_operand), name, &["S"])?;
            match type_operand {
                Operand::Value(Attr::S(type_name)) if TYPE_NAMES.contains(&type_name.as_str()) => {
                    Condition::HasType(path, type_name)
                }
                other => return Err(invalid(format!("Invalid attribute type name: {other:?}"))),
            }
        }
        _ => {
            tokens.expect(",")?;
            let argument = operand(tokens)?;
            check_distinct(name, subject.path(), &[argument.path()])?;
            if name == "contains" {
                Condition::Contains(subject, argument)
            } else {
                check_type(operand_type(&subject), name, &["S", "B"])?;
                check_type(operand_type(&argument), name, &["S", "B"])?;
                Condition::BeginsWith(subject, argument)
            }
        }
    };
    tokens.expect(")")?;
    Ok(condition)
}

/// A path, a `:value`, `size(operand)` or `(operand)`.
fn operand(tokens: &mut TokenStream<'_>) -> Parsed<Operand> {
    if *tokens.peek(0) == Token::Symbol("(") {
        return tokens.parenthesized(operand);
    }
    tokens.nested(|tokens| match tokens.function().as_deref() {
        Some("size") => {
            tokens.advance();
            tokens.expect("(")?;
            let inner = operand(tokens)?;
            check_type(
                operand_type(&inner),
                "size",
                &["S", "B", "SS", "NS", "L", "M"],
            )?;
            tokens.expect(")")?;
            Ok(Operand::Size(Box::new(inner)))
        }
        Some(name) if is_condition_function(name) => Err(invalid(format!(
            "The function is not allowed to be used this way in an expression; function: {name}"
        ))),
        Some(name) => Err(invalid(format!("Invalid function name; function: {name}"))),
        None if matches!(tokens.peek(0), Token::Value(_)) => Ok(Operand::Value(tokens.value()?)),
        None => Ok(Operand::Path(tokens.path()?)),
    })
}

/// `a <comparator> b`, `a BETWEEN b AND c` or `a IN (b, ...)`.
fn comparison(tokens: &mut TokenStream<'_>) -> Parsed<Condition> {
    let left = operand(tokens)?;
    let operator = COMPARATORS
        .into_iter()
        .find(|(symbol, _)| *tokens.peek(0) == Token::Symbol(symbol));
    if let Some((symbol, comparator)) = operator {
        tokens.advance();
        let right = operand(tokens)?;
        check_distinct(symbol, left.path(), &[right.path()])?;
        if !matches!(comparator, Comparator::Equal | Comparator::NotEqual) {
            check_type(operand_type(&left), symbol, SCALARS)?;
            check_type(operand_type(&right), symbol, SCALARS)?;
        }
        Ok(Condition::Compare(comparator, left, right))
    } else if tokens.eat("BETWEEN") {
        let low = operand(tokens)?;
        tokens.expect("AND")?;
        let high = operand(tokens)?;
        check_distinct("BETWEEN", left.path(), &[low.path(), high.path()])?;
        for operand in [&left, &low, &high] {
            check_type(operand_type(operand), "BETWEEN", SCALARS)?;
        }
        let bounds = low.value().zip(high.value());
        if bounds.is_some_and(|(low, high)| !scalar_order(low, high).is_some_and(|o| o.is_le())) {
            return Err(invalid(
                "The BETWEEN operator requires bounds of one type, the lower one not above \
                 the upper one",
            ));
        }
        Ok(Condition::Between(left, low, high))
    } else if tokens.eat("IN") {
        tokens.expect("(")?;
        let mut list = vec![operand(tokens)?];
        while tokens.eat(",") {
            list.push(operand(tokens)?);
        }
        tokens.expect(")")?;
        if list.len() > MAX_IN_OPERANDS {
            let count = list.len();
            return Err(invalid(format!(
                "The IN operator has too many operands: {count}"
            )));
        }
        let others: Vec<_> = list.iter().map(Operand::path).collect();
        check_distinct("IN", left.path(), &others)?;
        Ok(Condition::In(left, list))
    } else {
        Err(tokens.error("a comparator, BETWEEN or IN"))
    }
}

/// Clauses `SET`, `REMOVE`, `ADD` and `DELETE`, each at most once, in any order.
pub(crate) fn update(tokens: &mut TokenStream<'_>) -> Parsed<UpdateExpression> {
    let (mut update, mut seen) = (UpdateExpression::default(), BTreeSet::new());
    while *tokens.peek(0) != Token::End {
        let clause = match tokens.peek(0) {
            Token::Word(word) => word.to_ascii_uppercase(),
            _ => String::new(),
        };
        if !["SET", "REMOVE", "ADD", "DELETE"].contains(&clause.as_str()) {
            return Err(tokens.error("SET, REMOVE, ADD or DELETE"));
        }
        tokens.advance();
        if !seen.insert(clause.clone()) {
            let message = "section can only be used once in an update expression";
            return Err(invalid(format!("The \"{clause}\" {message}")));
        }
        loop {
            let path = tokens.path()?;
            match clause.as_str() {
                "SET" => {
                    tokens.expect("=")?;
                    update.set.push((path, set_value(tokens)?));
                }
                "REMOVE" => update.remove.push(path),
                "ADD" => {
                    let value = tokens.value()?;
                    check_type(Some(type_name(&value)), "ADD", &["N", "SS", "NS"])?;
                    update.add.push((path, value));
                }
                _ => {
                    let value = tokens.value()?;
                    check_type(Some(type_name(&value)), "DELETE", &["SS", "NS"])?;
                    update.delete.push((path, value));
                }
            }
            if !tokens.eat(",") {
                break;
            }
        }
    }
    Ok(update)
}

/// A `SET` value: `list_append(a, b)`, `operand`, `operand + operand`, `operand - operand`
/// or one of these in parentheses.
fn set_value(tokens: &mut TokenStream<'_>) -> Parsed<SetValue> {
    tokens.nested(|tokens| {
        if tokens.function().as_deref() == Some("list_append") {
            tokens.advance();
            tokens.expect("(")?;
            let first = set_operand(tokens)?;
            tokens.expect(",")?;
            let second = set_operand(tokens)?;
            tokens.expect(")")?;
            check_type(set_value_type(&first), "list_append", &["L"])?;
            check_type(set_value_type(&second), "list_append", &["L"])?;
            return Ok(SetValue::ListAppend(Box::new(first), Box::new(second)));
        }
        if *tokens.peek(0) == Token::Symbol("(") {
            return tokens.either(arithmetic, |tokens| tokens.parenthesized(set_value));
        }
        arithmetic(tokens)
    })
}

/// `operand`, `operand + operand` or `operand - operand`.
fn arithmetic(tokens: &mut TokenStream<'_>) -> Parsed<SetValue> {
    let left = set_operand(tokens)?;
    let symbol = match tokens.peek(0) {
        Token::Symbol(symbol @ ("+" | "-")) => *symbol,
        _ => return Ok(left),
    };
    tokens.advance();
    let right = set_operand(tokens)?;
    check_type(set_value_type(&left), symbol, &["N"])?;
    check_type(set_value_type(&right), symbol, &["N"])?;
    let (left, right) = (Box::new(left), Box::new(right));
    Ok(if symbol == "+" {
        SetValue::Plus(left, right)
    } else {
        SetValue::Minus(left, right)
    })
}

/// A path, a `:value`, `if_not_exists(path, operand)` or `(operand)`.
fn set_operand(tokens: &mut TokenStream<'_>) -> Parsed<SetValue> {
    if *tokens.peek(0) == Token::Symbol("(") {
        return tokens.parenthesized(set_operand);
    }
    tokens.nested(|tokens| match tokens.function().as_deref() {
        None if matches!(tokens.peek(0), Token::Value(_)) => Ok(SetValue::Value(tokens.value()?)),
        None => Ok(SetValue::Path(tokens.path()?)),
        Some("if_not_exists") => {
            tokens.advance();
            tokens.expect("(")?;
            let SetValue::Path(path) = set_operand(tokens)? else {
                return Err(invalid("Operator or function requires a document path"));
            };
            tokens.expect(",")?;
            let default = set_operand(tokens)?;
            tokens.expect(")")?;
            check_distinct("if_not_exists", Some(&path), &[default.path()])?;
            Ok(SetValue::IfNotExists(path, Box::new(default)))
        }
        Some(name) if name == "list_append" || name == "size" || is_condition_function(name) => {
            Err(invalid(format!(
                "The function is not allowed to be used this way in an update expression; \
                 function: {name}"
            )))
        }
        Some(name) => Err(invalid(format!("Invalid function name; function: {name}"))),
    })
}

/// Parses a condition expression, resolving its placeholders through `names` and `values`.
pub(crate) fn parse_condition(
    expression: &str,
    names: &BTreeMap<String, String>,
    values: &Item,
) -> Result<Condition, ExpressionError> {
    let mut tokens = TokenStream::new(expression, names, values)?;
    let condition = or_condition(&mut tokens)?;
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
    let update = update(&mut tokens)?;
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
    use std::collections::BTreeMap;

    use super::*;
    use crate::store::Item;

    /// The `:value` placeholders the tests use.
    fn values() -> Item {
        Item::from([
            (":s".into(), Attr::s("x")),
            (":n".into(), Attr::n(1)),
            (":m".into(), Attr::n(2)),
            (":b".into(), Attr::Bool(true)),
            (":l".into(), Attr::L(vec![Attr::n(1)])),
            (":ss".into(), Attr::Ss(vec!["x".into()])),
            (":t".into(), Attr::s("N")),
        ])
    }

    /// Parses a condition with the test placeholders.
    fn condition(text: &str) -> Parsed<Condition> {
        let names = BTreeMap::from([("#n".to_owned(), "n".to_owned())]);
        parse_condition(text, &names, &values())
    }

    /// Parses an update with the test placeholders.
    fn update(text: &str) -> Parsed<UpdateExpression> {
        parse_update(text, &BTreeMap::new(), &values())
    }

    /// Asserts that each `expression => fragment` line is refused, the message has the fragment.
    fn assert_refused<T: std::fmt::Debug>(parse: fn(&str) -> Parsed<T>, cases: &str) {
        for case in cases.lines().map(str::trim).filter(|case| !case.is_empty()) {
            let (text, fragment) = case.split_once(" => ").unwrap_or((case, ""));
            let error = parse(text).expect_err(text).to_string();
            assert!(error.contains(fragment), "{text}: {error}");
        }
    }

    #[test]
    fn refuses_conditions_dynamodb_refuses() {
        assert_eq!(condition("  "), Err(ExpressionError::Empty));
        assert_refused(
            condition,
            "a => Syntax error at byte 1: expected a comparator
            a = :s OR => Syntax error
            (a = :s => Syntax error
            a = 5 => Syntax error
            attribute_exists(a, b) => Syntax error
            a[x] = :s => Syntax error
            begins_with(a, :s) = :b => Syntax error
            status = :s => reserved keyword; reserved keyword: status
            ATTRIBUTE_EXISTS(a) => Invalid function name
            a < :b => operand type: BOOL
            a BETWEEN :m AND :n => BETWEEN
            a BETWEEN :s AND :n => BETWEEN
            #n = n => distinct
            a IN (b, a) => distinct
            attribute_type(a, :s) => type name
            attribute_exists(:s) => document path
            begins_with(a, :n) => operand type: N
            size(:n) = :n => operand type: N
            a[99999999999999999999999] = :s => too large
            ((a = :s)) => redundant parentheses
            NOT ((a)) = :s => redundant parentheses",
        );
        let list = |length: usize| format!("a IN ({})", vec![":n"; length].join(", "));
        assert!(condition(&list(100)).is_ok());
        let refused = condition(&list(101)).map_err(|error| error.to_string());
        assert!(refused.is_err_and(|error| error.contains("too many operands")));
        let fine = "attribute_type(a, :t) AND size(a) BETWEEN :n AND :m AND :n = :n; (a) = :s; \
            a = (:s); ((a) = :s); size((a)) = :n; attribute_exists((a)); (NOT (b = :s))";
        for text in fine.split("; ") {
            assert!(condition(text).is_ok(), "{text}");
        }
    }

    #[test]
    fn refuses_updates_dynamodb_refuses() {
        assert_refused(
            update,
            "SET => Syntax error at byte 3: expected an attribute name
            SET a = :n + :n + :n => Syntax error
            ADD a b => Syntax error
            UPSERT a = :n => Syntax error
            SET a = (:n => Syntax error
            SET a = :n SET b = :n => only be used once
            SET a = :n + :s => operand type: S
            SET a = b - :l => operand type: L
            ADD a :s => operand type: S
            DELETE a :n => operand type: N
            SET a = size(b) => not allowed
            SET a = if_not_exists(:n, :n) => document path
            SET a = if_not_exists(b, b) => distinct
            SET a = list_append(:n, :l) => operand type: N
            SET a = concat(b, :l) => Invalid function
            SET status = :n => reserved keyword
            SET a = ((:n)) => redundant parentheses
            SET a = (:n + a) - :n => Syntax error
            SET a = if_not_exists(b, :n + :m) => Syntax error
            SET a = list_append(list_append(b, :l), :l) => not allowed
            REMOVE (a) => Syntax error",
        );
        let fine = "set a = (:n + b), c = if_not_exists(c, :n) - :m, \
            d = list_append(if_not_exists(d, :l), :l) remove e[1] add f :ss; SET a = (:n) + :m; \
            SET a = ((:n) + b); SET a = (list_append(b, :l)); SET a = if_not_exists(b, (:n))";
        for text in fine.split("; ") {
            assert!(update(text).is_ok(), "{text}");
        }
    }

    #[test]
    fn refuses_what_is_too_long_or_too_deep_without_overflowing_the_stack() {
        let unsupported = |error: ExpressionError| matches!(error, ExpressionError::Unsupported(_));
        let (open, close) = ("(a = :s OR ".repeat(70), ")".repeat(70));
        assert!(condition(&format!("{open}a = :s{close}")).is_err_and(unsupported));
        assert!(condition(&format!("{}a{close}", "size(".repeat(70))).is_err_and(unsupported));
        let defaults = "if_not_exists(b, ".repeat(70);
        assert!(update(&format!("SET a = {defaults}:n{close}")).is_err_and(unsupported));
        assert!(condition(&format!("{}a = :s", "NOT ".repeat(1000))).is_ok());
        let long = format!("a = :s{}", " ".repeat(4091));
        assert!(condition(&long).is_err_and(|error| error.to_string().contains("size: 4097")));
        assert!(condition(&long[..4096]).is_ok());
    }
}

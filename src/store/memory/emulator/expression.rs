//! DynamoDB condition and update expressions, parsed into syntax trees ([`super::ast`]) with
//! the checks DynamoDB makes before it reads an item: grammar, placeholders, reserved words, the types
//! of `:value` operands, and overlapping update paths. [`super::evaluate`] runs the trees.

use std::collections::{BTreeMap, BTreeSet};

use super::ast::ExpressionError;
use super::lexer::{tokenize, Token};
use crate::store::Item;

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

#[cfg(test)]
mod tests {
    use super::super::ast::{Condition, Operand, Path};
    use super::super::parser::{parse_condition, parse_update};
    use super::*;
    use crate::store::Attr;

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

//! Items as DynamoDB documents: the attribute at a document path (read, written, removed),
//! values compared as DynamoDB compares them, numbers in DynamoDB's canonical text, and the
//! checks of value types and paths DynamoDB makes on an expression before reading any item.

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::fmt;

use super::ast::{ExpressionError, Operand, Path, PathElement, SetValue};
use super::decimal::{Decimal, NumberError};
use crate::store::{Attr, Item};

/// DynamoDB's name for the type of a value.
pub(crate) fn type_name(attr: &Attr) -> &'static str {
    match attr {
        Attr::S(_) => "S",
        Attr::N(_) => "N",
        Attr::B(_) => "B",
        Attr::Bool(_) => "BOOL",
        Attr::Null => "NULL",
        Attr::L(_) => "L",
        Attr::M(_) => "M",
        Attr::Ss(_) => "SS",
        Attr::Ns(_) => "NS",
    }
}

/// The order of two scalars of one type: strings by UTF-8 bytes, numbers by exact value,
/// binary bytewise; `None` for other or mismatched types and unreadable numbers.
pub(crate) fn scalar_order(a: &Attr, b: &Attr) -> Option<Ordering> {
    match (a, b) {
        (Attr::S(a), Attr::S(b)) => Some(a.as_bytes().cmp(b.as_bytes())),
        (Attr::B(a), Attr::B(b)) => Some(a.cmp(b)),
        (Attr::N(a), Attr::N(b)) => Some(Decimal::parse(a).ok()?.cmp(&Decimal::parse(b).ok()?)),
        _ => None,
    }
}

/// `attr` with every number in DynamoDB's canonical text (`"01.50"` becomes `"1.5"`).
pub(crate) fn canonical(attr: Attr) -> Attr {
    let number = |text: String| Decimal::parse(&text).map_or(text, |n| n.to_string());
    match attr {
        Attr::N(text) => Attr::N(number(text)),
        Attr::Ns(texts) => Attr::Ns(texts.into_iter().map(number).collect()),
        Attr::L(list) => Attr::L(list.into_iter().map(canonical).collect()),
        Attr::M(map) => Attr::M(map.into_iter().map(|(k, v)| (k, canonical(v))).collect()),
        other => other,
    }
}

/// Whether two values are equal as DynamoDB compares them: numbers by value, sets
/// regardless of order, lists and maps element by element.
pub(crate) fn equal(a: &Attr, b: &Attr) -> bool {
    match (a, b) {
        (Attr::N(x), Attr::N(y)) => scalar_order(a, b).map_or(x == y, Ordering::is_eq),
        (Attr::Ss(x), Attr::Ss(y)) => x.iter().collect::<BTreeSet<_>>() == y.iter().collect(),
        (Attr::Ns(x), Attr::Ns(y)) => match (number_set(x), number_set(y)) {
            (Some(x), Some(y)) => x == y,
            _ => x == y,
        },
        (Attr::L(x), Attr::L(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| equal(a, b)),
        (Attr::M(x), Attr::M(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| equal(v, w)))
        }
        _ => a == b,
    }
}

/// The attribute at `path` in `item`, if any.
pub(crate) fn lookup<'a>(item: &'a Item, path: &Path) -> Option<&'a Attr> {
    let (PathElement::Name(first), rest) = path.0.split_first()? else {
        return None;
    };
    rest.iter()
        .try_fold(item.get(first)?, |attr, element| match (attr, element) {
            (Attr::M(map), PathElement::Name(key)) => map.get(key),
            (Attr::L(list), PathElement::Index(index)) => list.get(*index),
            _ => None,
        })
}

/// The numbers of a number set, or `None` if one is not a number.
fn number_set(texts: &[String]) -> Option<BTreeSet<Decimal>> {
    texts.iter().map(|text| Decimal::parse(text).ok()).collect()
}

/// Whether the container holding the attribute at `path` exists (a top-level attribute's
/// container is the item itself).
pub(crate) fn has_parent(item: &Item, path: &Path) -> bool {
    match path.0.split_last() {
        Some((_, [])) => true,
        Some((last, parents)) => matches!(
            (lookup(item, &Path(parents.to_vec())), last),
            (Some(Attr::M(_)), PathElement::Name(_)) | (Some(Attr::L(_)), PathElement::Index(_))
        ),
        None => false,
    }
}

/// The container a path's last step is taken in, or an error naming the path.
fn parent_mut<'a>(item: &'a mut Item, path: &Path) -> Result<&'a mut Attr, ExpressionError> {
    let invalid = || ExpressionError::InvalidPath(path.to_string());
    let parents = path.0.split_last().map_or(&[][..], |(_, parents)| parents);
    let (PathElement::Name(first), rest) = parents.split_first().ok_or_else(invalid)? else {
        return Err(invalid());
    };
    let mut container = item.get_mut(first).ok_or_else(invalid)?;
    for element in rest {
        container = match (container, element) {
            (Attr::M(map), PathElement::Name(key)) => map.get_mut(key),
            (Attr::L(list), PathElement::Index(index)) => list.get_mut(*index),
            _ => None,
        }
        .ok_or_else(invalid)?;
    }
    Ok(container)
}

/// Writes `value` at `path`; an index past a list's end appends.
pub(crate) fn set_at(item: &mut Item, path: &Path, value: Attr) -> Result<(), ExpressionError> {
    if let [PathElement::Name(name)] = path.0.as_slice() {
        item.insert(name.clone(), value);
        return Ok(());
    }
    match (parent_mut(item, path)?, path.0.last()) {
        (Attr::M(map), Some(PathElement::Name(key))) => {
            map.insert(key.clone(), value);
        }
        (Attr::L(list), Some(PathElement::Index(index))) => match list.get_mut(*index) {
            Some(slot) => *slot = value,
            None => list.push(value),
        },
        _ => return Err(ExpressionError::InvalidPath(path.to_string())),
    }
    Ok(())
}

/// Removes the attribute at `path`; absent attributes and indexes are no-ops.
pub(crate) fn remove_at(item: &mut Item, path: &Path) -> Result<(), ExpressionError> {
    if let [PathElement::Name(name)] = path.0.as_slice() {
        item.remove(name);
        return Ok(());
    }
    match (parent_mut(item, path)?, path.0.last()) {
        (Attr::M(map), Some(PathElement::Name(key))) => {
            map.remove(key);
        }
        (Attr::L(list), Some(PathElement::Index(index))) => {
            if *index < list.len() {
                list.remove(*index);
            }
        }
        _ => return Err(ExpressionError::InvalidPath(path.to_string())),
    }
    Ok(())
}

/// Why DynamoDB refuses an attribute value in an item or an expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ValueError {
    /// A number DynamoDB cannot store.
    Number(NumberError),
    /// An empty set.
    EmptySet,
    /// A set holding an element twice (numbers compared by value).
    Duplicates,
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Number(error) => error.fmt(f),
            Self::EmptySet => f.write_str("A set may not be empty"),
            Self::Duplicates => f.write_str("Input collection contains duplicates"),
        }
    }
}

impl std::error::Error for ValueError {}

/// Checks `value` (and what it holds) as DynamoDB does on a write.
pub(crate) fn check_value(value: &Attr) -> Result<(), ValueError> {
    let distinct = |distinct: usize, all: usize| {
        if distinct < all {
            Err(ValueError::Duplicates)
        } else {
            Ok(())
        }
    };
    match value {
        Attr::N(text) => Decimal::parse(text).map(drop).map_err(ValueError::Number),
        Attr::Ss(set) | Attr::Ns(set) if set.is_empty() => Err(ValueError::EmptySet),
        Attr::Ss(set) => distinct(set.iter().collect::<BTreeSet<_>>().len(), set.len()),
        Attr::Ns(set) => {
            let numbers = set.iter().map(|n| Decimal::parse(n));
            let numbers = numbers.collect::<Result<BTreeSet<_>, _>>();
            distinct(numbers.map_err(ValueError::Number)?.len(), set.len())
        }
        Attr::L(list) => list.iter().try_for_each(check_value),
        Attr::M(map) => map.values().try_for_each(check_value),
        Attr::S(_) | Attr::B(_) | Attr::Bool(_) | Attr::Null => Ok(()),
    }
}

/// The type an operand is known to have before any item is read.
pub(crate) fn operand_type(operand: &Operand) -> Option<&'static str> {
    match operand {
        Operand::Value(value) => Some(type_name(value)),
        Operand::Size(_) => Some("N"),
        Operand::Path(_) => None,
    }
}

/// The type a `SET` operand is known to have before any item is read.
pub(crate) fn set_value_type(value: &SetValue) -> Option<&'static str> {
    match value {
        SetValue::Value(value) => Some(type_name(value)),
        SetValue::Plus(..) | SetValue::Minus(..) => Some("N"),
        SetValue::ListAppend(..) => Some("L"),
        SetValue::Path(_) | SetValue::IfNotExists(..) => None,
    }
}

/// Fails when an operand known to be of type `found` is not `allowed` for `function`.
pub(crate) fn check_type(
    found: Option<&str>,
    function: &str,
    allowed: &[&str],
) -> Result<(), ExpressionError> {
    match found {
        Some(found) if !allowed.contains(&found) => Err(ExpressionError::Invalid(format!(
            "Incorrect operand type for operator or function; \
             operator or function: {function}, operand type: {found}"
        ))),
        _ => Ok(()),
    }
}

/// Fails when the path `first` appears again among `others`, as DynamoDB does.
pub(crate) fn check_distinct(
    function: &str,
    first: Option<&Path>,
    others: &[Option<&Path>],
) -> Result<(), ExpressionError> {
    match first {
        Some(path) if others.contains(&Some(path)) => Err(ExpressionError::Invalid(format!(
            "The first operand must be distinct from the remaining operands for this operator \
             or function; operator: {function}, first operand: [{path}]"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_scalars_of_one_type_only() {
        let order = |a: Attr, b: Attr| scalar_order(&a, &b);
        assert_eq!(
            order(Attr::n("10"), Attr::n("9.5")),
            Some(Ordering::Greater)
        );
        assert_eq!(
            order(Attr::n("-0"), Attr::n("0.000")),
            Some(Ordering::Equal)
        );
        assert_eq!(order(Attr::s("10"), Attr::s("9")), Some(Ordering::Less));
        assert_eq!(order(Attr::s("é"), Attr::s("z")), Some(Ordering::Greater));
        assert_eq!(
            order(Attr::s("😀"), Attr::s("\u{fffd}")),
            Some(Ordering::Greater)
        );
        assert_eq!(
            order(Attr::B(vec![0xff]), Attr::B(vec![1, 2])),
            Some(Ordering::Greater)
        );
        assert_eq!(order(Attr::s("1"), Attr::n(1)), None);
        assert_eq!(order(Attr::Bool(true), Attr::Bool(false)), None);
        assert_eq!(order(Attr::n("x"), Attr::n(1)), None);
        assert_eq!(type_name(&Attr::Ns(vec![])), "NS");
    }

    #[test]
    fn equality_and_canonical_numbers_follow_dynamodb() {
        let numbers = |n: &[&str]| Attr::Ns(n.iter().map(|n| n.to_string()).collect());
        assert!(equal(&numbers(&["1", "2.0"]), &numbers(&["2", "1.00"])));
        let strings = |s: &[&str]| Attr::Ss(s.iter().map(|s| s.to_string()).collect());
        assert!(equal(&strings(&["a", "b"]), &strings(&["b", "a"])));
        assert!(!equal(&strings(&["a"]), &strings(&["a", "b"])));
        let map = |value: Attr| Attr::M(Item::from([("k".to_owned(), value)]));
        assert!(equal(
            &map(Attr::L(vec![Attr::n("1.0")])),
            &map(Attr::L(vec![Attr::n(1)]))
        ));
        assert!(!equal(&Attr::n(1), &Attr::s("1")) && !equal(&Attr::Null, &Attr::Bool(false)));
        let messy = map(Attr::L(vec![Attr::n("-0"), numbers(&["01.50", "1E2"])]));
        let clean = map(Attr::L(vec![Attr::n("0"), numbers(&["1.5", "100"])]));
        assert_eq!(canonical(messy), clean);
        assert_eq!(canonical(Attr::n("not a number")), Attr::n("not a number"));
    }

    #[test]
    fn refuses_the_values_dynamodb_refuses() {
        let refusal = |value: Attr| check_value(&value).map_err(|e| e.to_string());
        assert!(refusal(Attr::n("1e126")).is_err_and(|e| e.contains("overflow")));
        assert!(refusal(Attr::n("abc")).is_err_and(|e| e.contains("cannot be converted")));
        assert_eq!(check_value(&Attr::Ss(vec![])), Err(ValueError::EmptySet));
        let list = |set: Attr| Attr::L(vec![Attr::M(Item::from([("k".to_owned(), set)]))]);
        let numbers = Attr::Ns(vec!["1".into(), "1.0".into()]);
        assert_eq!(check_value(&list(numbers)), Err(ValueError::Duplicates));
        assert!(
            refusal(Attr::Ns(vec!["1".into(), "x".into()])).is_err_and(|e| e.contains("converted"))
        );
        assert_eq!(
            check_value(&Attr::Ss(vec!["x".into(), "x".into()])),
            Err(ValueError::Duplicates)
        );
        let fine = [
            Attr::s(""),
            Attr::n("-0"),
            Attr::Ss(vec!["x".into(), "y".into()]),
        ];
        assert!(fine.iter().all(|value| check_value(value).is_ok()));
    }

    #[test]
    fn paths_lead_through_maps_and_lists() {
        let path = |elements: &[PathElement]| Path(elements.to_vec());
        let (name, index) = (|n: &str| PathElement::Name(n.into()), PathElement::Index);
        let mut item = Item::from([("m".to_owned(), Attr::M(Item::new()))]);
        set_at(&mut item, &path(&[name("m"), name("l")]), Attr::L(vec![])).unwrap();
        set_at(
            &mut item,
            &path(&[name("m"), name("l"), index(5)]),
            Attr::n(1),
        )
        .unwrap();
        assert_eq!(
            lookup(&item, &path(&[name("m"), name("l"), index(0)])),
            Some(&Attr::n(1))
        );
        let invalid = set_at(&mut item, &path(&[name("x"), name("y")]), Attr::Null);
        assert_eq!(invalid, Err(ExpressionError::InvalidPath("x.y".into())));
        remove_at(&mut item, &path(&[name("m"), name("l"), index(3)])).unwrap();
        remove_at(&mut item, &path(&[name("m"), name("l"), index(0)])).unwrap();
        assert_eq!(
            lookup(&item, &path(&[name("m"), name("l")])),
            Some(&Attr::L(vec![]))
        );
        assert!(remove_at(&mut item, &path(&[name("m"), index(0)])).is_err());
        assert_eq!(lookup(&item, &path(&[index(0)])), None);
    }
}

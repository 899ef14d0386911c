//! Runs parsed expressions against items as DynamoDB does: a condition gives a truth value
//! (an absent attribute or mismatched types make comparisons false and `<>` true); an update
//! evaluates every action on the item as it was, then writes all of them or none.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashSet};

use super::ast::{Comparator, Condition, ExpressionError, Operand, Path, SetValue};
use super::decimal::Decimal;
use super::document::{
    canonical, equal, has_parent, lookup, remove_at, scalar_order, set_at, type_name,
};
use super::parser::{parse_condition, parse_update};
use crate::store::{Attr, Item};

/// Whether `expression` holds for `item` (`None`: no such item).
pub(crate) fn condition_holds(
    expression: &str,
    item: Option<&Item>,
    names: &BTreeMap<String, String>,
    values: &Item,
) -> Result<bool, ExpressionError> {
    Ok(holds(&parse_condition(expression, names, values)?, item))
}

/// Applies the update `expression` to `item`; on an error `item` is unchanged.
pub(crate) fn apply_update(
    expression: &str,
    item: &mut Item,
    names: &BTreeMap<String, String>,
    values: &Item,
) -> Result<(), ExpressionError> {
    let update = parse_update(expression, names, values)?;
    let mut assignments = Vec::new();
    for (path, value) in &update.set {
        assignments.push((path, Some(canonical(set_value(value, item)?))));
    }
    for (path, value) in &update.add {
        assignments.push((path, Some(added(lookup(item, path), value)?)));
    }
    for (path, value) in &update.delete {
        match lookup(item, path) {
            Some(current) => assignments.push((path, deleted(current, value)?)),
            None if !has_parent(item, path) => {
                return Err(ExpressionError::InvalidPath(path.to_string()));
            }
            None => {}
        }
    }
    // List indexes: SET appends in index order; REMOVE takes the highest index first, so
    // every index means what it meant before the update.
    assignments.sort_by(|a, b| a.0.cmp(b.0));
    let mut removals: Vec<&Path> = update.remove.iter().collect();
    removals.sort_by(|a, b| b.cmp(a));
    let mut updated = item.clone();
    for (path, value) in assignments
        .into_iter()
        .chain(removals.into_iter().map(|p| (p, None)))
    {
        match value {
            Some(value) => set_at(&mut updated, path, value)?,
            None => remove_at(&mut updated, path)?,
        }
    }
    *item = updated;
    Ok(())
}

/// Whether `condition` holds for `item`.
fn holds(condition: &Condition, item: Option<&Item>) -> bool {
    let value = |operand| operand_value(operand, item);
    match condition {
        Condition::Compare(comparator, a, b) => {
            let pair = value(a).zip(value(b));
            let order = pair.as_ref().and_then(|(a, b)| scalar_order(a, b));
            match comparator {
                Comparator::Equal => pair.is_some_and(|(a, b)| equal(&a, &b)),
                Comparator::NotEqual => !pair.is_some_and(|(a, b)| equal(&a, &b)),
                Comparator::Less => order.is_some_and(Ordering::is_lt),
                Comparator::LessOrEqual => order.is_some_and(Ordering::is_le),
                Comparator::Greater => order.is_some_and(Ordering::is_gt),
                Comparator::GreaterOrEqual => order.is_some_and(Ordering::is_ge),
            }
        }
        Condition::Between(a, low, high) => value(a).is_some_and(|a| {
            let within = |bound, accept: fn(Ordering) -> bool| {
                value(bound)
                    .and_then(|b| scalar_order(&a, &b))
                    .is_some_and(accept)
            };
            within(low, Ordering::is_ge) && within(high, Ordering::is_le)
        }),
        Condition::In(a, list) => {
            value(a).is_some_and(|a| list.iter().any(|b| value(b).is_some_and(|b| equal(&a, &b))))
        }
        Condition::Exists(path) => item.and_then(|item| lookup(item, path)).is_some(),
        Condition::NotExists(path) => item.and_then(|item| lookup(item, path)).is_none(),
        Condition::HasType(path, name) => item
            .and_then(|item| lookup(item, path))
            .is_some_and(|attr| type_name(attr) == name),
        Condition::BeginsWith(a, prefix) => match (value(a).as_deref(), value(prefix).as_deref()) {
            (Some(Attr::S(s)), Some(Attr::S(prefix))) => s.starts_with(prefix.as_str()),
            (Some(Attr::B(b)), Some(Attr::B(prefix))) => b.starts_with(prefix),
            _ => false,
        },
        Condition::Contains(a, b) => match (value(a).as_deref(), value(b).as_deref()) {
            (Some(Attr::S(s)), Some(Attr::S(part))) => s.contains(part.as_str()),
            (Some(Attr::B(b)), Some(Attr::B(part))) => {
                part.is_empty()
                    || b.windows(part.len())
                        .any(|window| window == part.as_slice())
            }
            (Some(Attr::Ss(set)), Some(Attr::S(element))) => set.contains(element),
            (Some(Attr::Ns(set)), Some(element @ Attr::N(_))) => {
                set.iter().any(|n| equal(&Attr::N(n.clone()), element))
            }
            (Some(Attr::L(list)), Some(element)) => {
                list.iter().any(|member| equal(member, element))
            }
            _ => false,
        },
        Condition::Not(inner) => !holds(inner, item),
        Condition::And(a, b) => holds(a, item) && holds(b, item),
        Condition::Or(a, b) => holds(a, item) || holds(b, item),
    }
}

/// The value of a condition operand (`None`: absent attribute, or `size` of a type that has none).
fn operand_value<'a>(operand: &'a Operand, item: Option<&'a Item>) -> Option<Cow<'a, Attr>> {
    match operand {
        Operand::Path(path) => item.and_then(|item| lookup(item, path)).map(Cow::Borrowed),
        Operand::Value(value) => Some(Cow::Borrowed(value)),
        Operand::Size(inner) => {
            let size = match operand_value(inner, item)?.as_ref() {
                // DynamoDB Local counts a string's UTF-16 code units ("😀" has size 2).
                Attr::S(s) => s.encode_utf16().count(),
                Attr::B(b) => b.len(),
                Attr::Ss(set) | Attr::Ns(set) => set.len(),
                Attr::L(list) => list.len(),
                Attr::M(map) => map.len(),
                Attr::N(_) | Attr::Bool(_) | Attr::Null => return None,
            };
            Some(Cow::Owned(Attr::N(size.to_string())))
        }
    }
}

/// The value a `SET` action's right-hand side evaluates to on `item`.
fn set_value(value: &SetValue, item: &Item) -> Result<Attr, ExpressionError> {
    match value {
        SetValue::Path(path) => lookup(item, path)
            .cloned()
            .ok_or_else(|| ExpressionError::MissingAttribute(path.to_string())),
        SetValue::Value(value) => Ok(value.clone()),
        SetValue::IfNotExists(path, default) => match lookup(item, path) {
            Some(existing) => Ok(existing.clone()),
            None => set_value(default, item),
        },
        SetValue::ListAppend(a, b) => match (set_value(a, item)?, set_value(b, item)?) {
            (Attr::L(mut first), Attr::L(second)) => {
                first.extend(second);
                Ok(Attr::L(first))
            }
            (a, b) => Err(type_error("list_append", &a, &b)),
        },
        SetValue::Plus(a, b) => arithmetic(&set_value(a, item)?, &set_value(b, item)?, false),
        SetValue::Minus(a, b) => arithmetic(&set_value(a, item)?, &set_value(b, item)?, true),
    }
}

/// A [`ExpressionError::Type`] for `operation` on `a` and `b`.
fn type_error(operation: &str, a: &Attr, b: &Attr) -> ExpressionError {
    ExpressionError::Type(format!(
        "{operation} on {} and {}",
        type_name(a),
        type_name(b)
    ))
}

/// `a + b` or `a - b`, exactly, for two numbers.
fn arithmetic(a: &Attr, b: &Attr, subtract: bool) -> Result<Attr, ExpressionError> {
    let (Attr::N(x), Attr::N(y)) = (a, b) else {
        return Err(type_error(if subtract { "-" } else { "+" }, a, b));
    };
    let (x, y) = (Decimal::parse(x), Decimal::parse(y));
    let (x, y) = (
        x.map_err(ExpressionError::Number)?,
        y.map_err(ExpressionError::Number)?,
    );
    let result = if subtract { x.subtract(&y) } else { x.add(&y) };
    result
        .map(|n| Attr::N(n.to_string()))
        .map_err(ExpressionError::Number)
}

/// The values of a number set's elements.
fn number_values(set: &[String]) -> Result<Vec<Decimal>, ExpressionError> {
    set.iter()
        .map(|n| Decimal::parse(n).map_err(ExpressionError::Number))
        .collect()
}

/// The value after `ADD value`: the value itself when absent, a sum, or a set union.
fn added(current: Option<&Attr>, value: &Attr) -> Result<Attr, ExpressionError> {
    match (current, value) {
        (None, value) => Ok(canonical(value.clone())),
        (Some(current @ Attr::N(_)), Attr::N(_)) => arithmetic(current, value, false),
        (Some(Attr::Ss(set)), Attr::Ss(more)) => {
            let mut seen: HashSet<&String> = set.iter().collect();
            let mut union = set.clone();
            union.extend(more.iter().filter(|s| seen.insert(s)).cloned());
            Ok(Attr::Ss(union))
        }
        (Some(Attr::Ns(set)), Attr::Ns(more)) => {
            // Numbers compare by value: `1` and `1.0` are one element.
            let mut seen: HashSet<Decimal> = number_values(set)?.into_iter().collect();
            let mut union = set.clone();
            for (number, value) in more.iter().zip(number_values(more)?) {
                if seen.insert(value) {
                    union.push(number.clone());
                }
            }
            Ok(canonical(Attr::Ns(union)))
        }
        (Some(current), value) => Err(type_error("ADD", current, value)),
    }
}

/// The value after `DELETE value` (set difference), `None` when the set empties.
fn deleted(current: &Attr, value: &Attr) -> Result<Option<Attr>, ExpressionError> {
    let remaining = match (current, value) {
        (Attr::Ss(set), Attr::Ss(gone)) => {
            let gone: HashSet<&String> = gone.iter().collect();
            Attr::Ss(set.iter().filter(|s| !gone.contains(s)).cloned().collect())
        }
        (Attr::Ns(set), Attr::Ns(gone)) => {
            let gone: HashSet<Decimal> = number_values(gone)?.into_iter().collect();
            let values = number_values(set)?;
            Attr::Ns(
                set.iter()
                    .zip(values)
                    .filter(|(_, value)| !gone.contains(value))
                    .map(|(number, _)| number.clone())
                    .collect(),
            )
        }
        _ => return Err(type_error("DELETE", current, value)),
    };
    Ok(match &remaining {
        Attr::Ss(set) | Attr::Ns(set) if set.is_empty() => None,
        _ => Some(remaining),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An item from `name=value` pairs: numbers, `'strings`, `[lists of numbers]`.
    fn item(attributes: &str) -> Item {
        let attribute = |pair: &str| {
            let (name, value) = pair.split_once('=').unwrap();
            let value = match value.strip_prefix('\'') {
                Some(text) => Attr::s(text),
                None => match value.strip_prefix('[') {
                    Some(list) => Attr::L(item_list(list.trim_end_matches(']'))),
                    None => Attr::n(value),
                },
            };
            (name.to_owned(), value)
        };
        attributes.split_whitespace().map(attribute).collect()
    }

    /// Numbers separated by commas.
    fn item_list(numbers: &str) -> Vec<Attr> {
        numbers
            .split(',')
            .filter(|n| !n.is_empty())
            .map(Attr::n)
            .collect()
    }

    /// The `:value` placeholders the tests use.
    fn values() -> Item {
        let mut values = item(":five=5.0 :six=6 :p=0.1 :q=0.2 :zero=-0 :n1=1 :l=[7]");
        values.extend(item(":one='1 :x='x :N='N :SS='SS"));
        values.insert(":bin".into(), Attr::B(vec![1]));
        values.insert(":ss".into(), Attr::Ss(vec!["x".into(), "y".into()]));
        values.insert(":ns".into(), Attr::Ns(vec!["1".into(), "2.0".into()]));
        values
    }

    /// Asserts that the `;`-separated conditions in `holding` hold and those in `failing` do not.
    fn assert_conditions(subject: Option<&Item>, holding: &str, failing: &str) {
        let names = BTreeMap::from([("#a".to_owned(), "a".to_owned())]);
        for (conditions, expected) in [(holding, true), (failing, false)] {
            for condition in conditions.split(';').map(str::trim) {
                let holds = condition_holds(condition, subject, &names, &values());
                assert_eq!(holds, Ok(expected), "{condition} on {subject:?}");
            }
        }
    }

    /// Applies `expression` with the test placeholders.
    fn update(expression: &str, subject: &mut Item) -> Result<(), ExpressionError> {
        let names = BTreeMap::from([("#b".to_owned(), "balance".to_owned())]);
        apply_update(expression, subject, &names, &values())
    }

    #[test]
    fn compares_numbers_by_value_strings_and_binary_by_bytes() {
        let mut five = item("a=5 s='é");
        five.insert("b".into(), Attr::B(vec![0xff]));
        let holding = "a = :five; a < :six; a <= :five; a >= :five; s > :x; b > :bin; \
            a BETWEEN :five AND :six; a IN (:one, :six, :five); size(s) = :n1; NOT a = :six";
        let failing = "#a <> :five; a > :five; a > :six; a BETWEEN :six AND :six; \
            a IN (:one, :six); size(s) = :one; s < :x";
        assert_conditions(Some(&five), holding, failing);
    }

    #[test]
    fn a_missing_attribute_or_item_fails_every_comparison_but_not_equal() {
        let holding = "a <> :five; NOT a < :six; NOT size(a) < :six; attribute_not_exists(a); \
            a <> b; NOT (a = :x OR a > :x)";
        let failing = "a = :five; a < :six; a >= :six; a BETWEEN :five AND :six; a IN (:five); \
            size(a) < :six; attribute_exists(a); attribute_type(a, :N); begins_with(a, :x); \
            contains(a, :x); a.b = :x; a[0] = :x; a = b";
        assert_conditions(Some(&item("z=5")), holding, failing);
        assert_conditions(None, holding, failing);
    }

    #[test]
    fn mismatched_types_are_unequal_and_unordered() {
        let mut subject = item("a='1");
        subject.insert("t".into(), Attr::Bool(true));
        let holding = "a = :one; a <> :five; NOT t >= :six; NOT a < :six";
        let failing = "a = :n1; a < :six; a >= :six; t < :six; a BETWEEN :five AND :six";
        assert_conditions(Some(&subject), holding, failing);
    }

    #[test]
    fn functions_follow_dynamodb() {
        let mut subject = item("s='xyz😀 n=6 ns=5 l=[6.00,7]");
        subject.insert("b".into(), Attr::B(vec![1, 2, 3]));
        subject.insert("ss".into(), Attr::Ss(vec!["y".into(), "x".into()]));
        subject.insert("ns".into(), Attr::Ns(vec!["5".into()]));
        subject.insert("m".into(), Attr::M(item("k='v")));
        let holding = "attribute_exists(m.k); attribute_not_exists(m.j); attribute_type(n, :N); \
            attribute_type(ss, :SS); begins_with(s, :x); begins_with(b, :bin); contains(s, :x); \
            contains(b, :bin); contains(ss, :x); contains(ns, :five); contains(l, :six); \
            size(s) = :five; size(l) < :five; ss = :ss; l[0] = :six; \
            s = :x OR n = :six AND NOT s = :x; (s = :x OR n = :six) AND n = :six";
        let failing = "attribute_type(s, :N); begins_with(n, :one); contains(l, :x); \
            contains(n, :six); size(m) IN (:one, :p, :six); size(n) >= :zero; ns = :ns; \
            l = :l; NOT (s = :x OR n = :six); s = :x OR n = :six AND NOT n = :six";
        assert_conditions(Some(&subject), holding, failing);
    }

    #[test]
    fn arithmetic_is_exact_and_canonical() {
        let mut subject = item("big=12345678901234567890123456789012345678");
        let sums = "SET c = :p + :q, d = :p - :q, z = :zero, e = :five, big = big";
        update(&format!("{sums} + :one"), &mut subject).expect_err("a string is no number");
        update(&format!("{sums} - :six"), &mut subject).unwrap();
        let expected = "big=12345678901234567890123456789012345672 c=0.3 d=-0.1 z=0 e=5";
        assert_eq!(subject, item(expected));
        let nines = item(&format!("n={} tiny=1E-30", "9".repeat(38)));
        let mut sum = nines.clone();
        update("SET n = n + :n1", &mut sum).unwrap();
        assert_eq!(sum.get("n"), Some(&Attr::n(format!("1{}", "0".repeat(38)))));
        for too_precise in ["SET n = n + :six", "SET n = n + tiny"] {
            let error = update(too_precise, &mut nines.clone());
            assert!(
                matches!(error, Err(ExpressionError::Number(_))),
                "{error:?}"
            );
        }
    }

    #[test]
    fn add_creates_or_adds_and_set_arithmetic_needs_the_attribute() {
        let mut ledger = item("account='acct-1");
        update("ADD #b :six", &mut ledger).unwrap();
        update("ADD #b :five", &mut ledger).unwrap();
        assert_eq!(ledger, item("account='acct-1 balance=11"));
        let mut empty = item("account='acct-1");
        let missing = update("SET #b = #b + :six", &mut empty);
        assert_eq!(
            missing,
            Err(ExpressionError::MissingAttribute("balance".into()))
        );
        assert_eq!(empty, item("account='acct-1"));
        let defaults =
            "SET #b = if_not_exists(#b, :zero) + :six, initial = if_not_exists(initial, :x)";
        update(defaults, &mut empty).unwrap();
        update(defaults, &mut empty).unwrap();
        assert_eq!(empty, item("account='acct-1 balance=12 initial='x"));
    }

    #[test]
    fn type_errors_and_bad_paths_change_nothing() {
        let mut original = item("s='x n=1");
        original.insert("ss".into(), Attr::Ss(vec!["x".into()]));
        let failing = "ADD s :six; SET n = s + :six; SET n = list_append(n, :l); ADD ss :ns; \
            DELETE n :ss; ADD n :ss; SET s.t = :x; SET s[0] = :x; REMOVE s.t; REMOVE q.t; \
            SET ok = :x, bad = q; ADD q.r :six";
        for expression in failing.split(';').map(str::trim) {
            let mut subject = original.clone();
            assert!(update(expression, &mut subject).is_err(), "{expression}");
            assert_eq!(subject, original, "{expression}");
        }
    }

    #[test]
    fn sets_lists_maps_and_removal() {
        let mut subject = item("l=[0,1,2] gone=0");
        subject.insert("ss".into(), Attr::Ss(vec!["x".into()]));
        subject.insert("ns".into(), Attr::Ns(vec!["1".into(), "3".into()]));
        subject.insert("single".into(), Attr::Ss(vec!["y".into()]));
        subject.insert("m".into(), Attr::M(Item::new()));
        let expression =
            "ADD ss :ss, ns :ns, fresh :ns DELETE single :ss REMOVE gone, l[0], absent \
            SET l[1] = :x, l[9] = :six, l[8] = :five, m.k = :l, c = list_append(l, :l)";
        update(expression, &mut subject).unwrap();
        assert_eq!(
            subject.get("ss"),
            Some(&Attr::Ss(vec!["x".into(), "y".into()]))
        );
        let numbers = |n: &[&str]| Some(Attr::Ns(n.iter().map(|n| n.to_string()).collect()));
        assert_eq!(subject.get("ns").cloned(), numbers(&["1", "3", "2"]));
        assert_eq!(subject.get("fresh").cloned(), numbers(&["1", "2"]));
        assert_eq!((subject.get("single"), subject.get("gone")), (None, None));
        let list = [Attr::s("x"), Attr::n(2), Attr::n(5), Attr::n(6)];
        assert_eq!(subject.get("l"), Some(&Attr::L(list.to_vec())));
        assert_eq!(subject.get("c"), Some(&Attr::L(item_list("0,1,2,7"))));
        assert_eq!(subject.get("m"), Some(&Attr::M(item("k=[7]"))));
        update("DELETE ss :ss, nothing :ss", &mut subject).unwrap();
        assert_eq!(subject.get("ss"), None);
    }

    #[test]
    fn every_action_reads_the_item_as_it_was() {
        let mut subject = item("b=1");
        update("SET c = b, b = :six", &mut subject).unwrap();
        assert_eq!(subject, item("b=6 c=1"));
    }
}

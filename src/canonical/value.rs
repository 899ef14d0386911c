//! The canonical JSON of a Rust value (a function's arguments): serde_json's text, with the
//! elements of every hash set in one order, then its [canonical](super::canonical) form.
//!
//! serde cannot tell a set from a list: `HashSet`, `Vec` and `BTreeSet` all serialize
//! through `Serializer::collect_seq`. A `Vec`'s order is part of its value, and a
//! `BTreeSet`'s is its elements' own; a `HashSet`'s is how its hasher (random per set) placed
//! them, so two equal sets give two texts. Sorting every array would make `[a, b]` and
//! `[b, a]` one key (one call's result given to another); so only the sequences whose type
//! is a hash set, std's or hashbrown's (told by `std::any::type_name`, the iterable that
//! their `Serialize` passes to `collect_seq`), are written with their elements sorted by
//! their canonical text. Any other sequence keeps its order: a type name this does not
//! recognize (its format is not guaranteed across compilers) is today's text, never a
//! merged key; `value::tests` pins the names.
//!
//! Everything else is serde_json's own serializer: [`SortSets`] hands each call on to it,
//! wrapping the values inside, so the text is the one `serde_json::to_string` writes
//! (integers past 64 bits with every digit) except for hash sets.

use serde::ser::{self, Serialize, Serializer};
use serde_json::value::RawValue;

/// The canonical JSON of `value`, its hash sets in the order of their elements' canonical
/// text. Fails as `serde_json::to_string` does (a map with keys that are not strings), or
/// when it is nested deeper than [`MAX_DEPTH`](super::MAX_DEPTH).
pub(crate) fn canonical_value<T: Serialize + ?Sized>(
    value: &T,
) -> Result<String, serde_json::Error> {
    super::canonical(&serialized_text(value)?)
}

/// The JSON text serde_json writes for `value`, its hash sets in the order of their
/// elements' canonical text: what [`canonical_value`] is the canonical form of (numbers as
/// serde_json writes them, `25` and `2.0`).
pub(crate) fn serialized_text<T: Serialize + ?Sized>(
    value: &T,
) -> Result<String, serde_json::Error> {
    let mut text = Vec::with_capacity(128);
    value.serialize(SortSets(&mut serde_json::Serializer::new(&mut text)))?;
    // serde_json writes UTF-8; a failure here would be its bug, reported, not a panic.
    String::from_utf8(text).map_err(ser::Error::custom)
}

/// The type paths of hash sets, as `std::any::type_name` writes them (after any `&`).
const HASH_SETS: [&str; 2] = [
    "std::collections::hash::set::HashSet<",
    "hashbrown::set::HashSet<",
];

/// Whether `I` (what a `Serialize` gave `collect_seq`) is a hash set or a reference to one.
fn is_hash_set<I: ?Sized>() -> bool {
    let mut name = std::any::type_name::<I>();
    while let Some(referent) = name.strip_prefix('&') {
        name = referent.strip_prefix("mut ").unwrap_or(referent);
    }
    HASH_SETS.iter().any(|set| name.starts_with(set))
}

/// A serializer (or one of its compound serializers) that hands every call on to the one it
/// wraps, writing hash sets with their elements sorted, and wrapping the values inside so
/// that nested sets are sorted too.
struct SortSets<S>(S);

/// A value serialized through [`SortSets`].
struct Sorted<'a, T: ?Sized>(&'a T);

impl<T: Serialize + ?Sized> Serialize for Sorted<'_, T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(SortSets(serializer))
    }
}

/// Hands the scalar `serialize_*` methods on to the wrapped serializer.
macro_rules! forward_scalars {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {$(
        fn $method(self, $($arg: $ty),*) -> Result<S::Ok, S::Error> {
            self.0.$method($($arg),*)
        }
    )*};
}

impl<S: Serializer> Serializer for SortSets<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    type SerializeSeq = SortSets<S::SerializeSeq>;
    type SerializeTuple = SortSets<S::SerializeTuple>;
    type SerializeTupleStruct = SortSets<S::SerializeTupleStruct>;
    type SerializeTupleVariant = SortSets<S::SerializeTupleVariant>;
    type SerializeMap = SortSets<S::SerializeMap>;
    type SerializeStruct = SortSets<S::SerializeStruct>;
    type SerializeStructVariant = SortSets<S::SerializeStructVariant>;

    forward_scalars! {
        serialize_bool(v: bool);
        serialize_i8(v: i8);
        serialize_i16(v: i16);
        serialize_i32(v: i32);
        serialize_i64(v: i64);
        serialize_i128(v: i128);
        serialize_u8(v: u8);
        serialize_u16(v: u16);
        serialize_u32(v: u32);
        serialize_u64(v: u64);
        serialize_u128(v: u128);
        serialize_f32(v: f32);
        serialize_f64(v: f64);
        serialize_char(v: char);
        serialize_str(v: &str);
        serialize_bytes(v: &[u8]);
        serialize_none();
        serialize_unit();
        serialize_unit_struct(name: &'static str);
        serialize_unit_variant(name: &'static str, index: u32, variant: &'static str);
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<S::Ok, S::Error> {
        self.0.serialize_some(&Sorted(value))
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<S::Ok, S::Error> {
        self.0.serialize_newtype_struct(name, &Sorted(value))
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<S::Ok, S::Error> {
        self.0
            .serialize_newtype_variant(name, index, variant, &Sorted(value))
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<Self::SerializeSeq, S::Error> {
        self.0.serialize_seq(len).map(SortSets)
    }

    fn serialize_tuple(self, len: usize) -> Result<Self::SerializeTuple, S::Error> {
        self.0.serialize_tuple(len).map(SortSets)
    }

    fn serialize_tuple_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleStruct, S::Error> {
        self.0.serialize_tuple_struct(name, len).map(SortSets)
    }

    fn serialize_tuple_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleVariant, S::Error> {
        self.0
            .serialize_tuple_variant(name, index, variant, len)
            .map(SortSets)
    }

    fn serialize_map(self, len: Option<usize>) -> Result<Self::SerializeMap, S::Error> {
        self.0.serialize_map(len).map(SortSets)
    }

    fn serialize_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStruct, S::Error> {
        self.0.serialize_struct(name, len).map(SortSets)
    }

    fn serialize_struct_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStructVariant, S::Error> {
        self.0
            .serialize_struct_variant(name, index, variant, len)
            .map(SortSets)
    }

    // A hash set's elements by their canonical text, written as that text; any other
    // sequence as serde's default `collect_seq` writes it, through this serializer.
    // (`collect_map` is serde's default too: its entries go through `SerializeMap` below, and
    // `canonical` sorts the members.)
    fn collect_seq<I>(self, iter: I) -> Result<S::Ok, S::Error>
    where
        I: IntoIterator,
        I::Item: Serialize,
    {
        let iter = iter.into_iter();
        if !is_hash_set::<I>() {
            let len = match iter.size_hint() {
                (lower, Some(upper)) if lower == upper => Some(lower),
                _ => None,
            };
            let mut seq = self.serialize_seq(len)?;
            for item in iter {
                ser::SerializeSeq::serialize_element(&mut seq, &item)?;
            }
            return ser::SerializeSeq::end(seq);
        }
        let mut elements = iter
            .map(|item| canonical_value(&item).and_then(RawValue::from_string))
            .collect::<Result<Vec<Box<RawValue>>, _>>()
            .map_err(ser::Error::custom)?;
        elements.sort_unstable_by(|a, b| a.get().cmp(b.get()));
        let mut seq = self.0.serialize_seq(Some(elements.len()))?;
        for element in &elements {
            ser::SerializeSeq::serialize_element(&mut seq, element)?;
        }
        ser::SerializeSeq::end(seq)
    }

    fn collect_str<T: std::fmt::Display + ?Sized>(self, value: &T) -> Result<S::Ok, S::Error> {
        self.0.collect_str(value)
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

/// The compound serializers of one element kind, each element wrapped in [`Sorted`].
macro_rules! sorted_elements {
    ($($compound:ident::$element:ident),+ $(,)?) => {$(
        impl<S: ser::$compound> ser::$compound for SortSets<S> {
            type Ok = S::Ok;
            type Error = S::Error;

            fn $element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), S::Error> {
                self.0.$element(&Sorted(value))
            }

            fn end(self) -> Result<S::Ok, S::Error> {
                self.0.end()
            }
        }
    )+};
}

sorted_elements!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field,
);

impl<S: ser::SerializeMap> ser::SerializeMap for SortSets<S> {
    type Ok = S::Ok;
    type Error = S::Error;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), S::Error> {
        self.0.serialize_key(&Sorted(key))
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), S::Error> {
        self.0.serialize_value(&Sorted(value))
    }

    fn end(self) -> Result<S::Ok, S::Error> {
        self.0.end()
    }
}

/// The compound serializers of named fields (a struct's, a struct variant's), each field's
/// value wrapped in [`Sorted`].
macro_rules! sorted_fields {
    ($($compound:ident),+ $(,)?) => {$(
        impl<S: ser::$compound> ser::$compound for SortSets<S> {
            type Ok = S::Ok;
            type Error = S::Error;

            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Result<(), S::Error> {
                self.0.serialize_field(key, &Sorted(value))
            }

            fn skip_field(&mut self, key: &'static str) -> Result<(), S::Error> {
                self.0.skip_field(key)
            }

            fn end(self) -> Result<S::Ok, S::Error> {
                self.0.end()
            }
        }
    )+};
}

sorted_fields!(SerializeStruct, SerializeStructVariant);

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

    use serde::Serialize;

    use super::*;

    /// Today's form: serde_json's text, canonical.
    fn plain<T: Serialize + ?Sized>(value: &T) -> String {
        super::super::canonical(&serde_json::to_string(value).unwrap()).unwrap()
    }

    /// Sets of the same elements built until two iterate in other orders.
    fn equal_sets_iterating_differently<T: Clone + Eq + std::hash::Hash>(
        items: &[T],
    ) -> (HashSet<T>, HashSet<T>) {
        let a: HashSet<T> = items.iter().cloned().collect();
        for capacity in 0..200 {
            let mut b = HashSet::with_capacity(capacity);
            b.extend(items.iter().rev().cloned());
            if a.iter().ne(b.iter()) {
                return (a, b);
            }
        }
        panic!("200 sets of the same elements all iterated in one order");
    }

    /// The names `is_hash_set` relies on, as this compiler writes them: if one changes, the
    /// sets it names fall back to their iteration order (two keys for equal sets), and this
    /// test says so.
    #[test]
    fn hash_sets_are_told_by_their_type_names() {
        fn told<I>(_: I) -> bool {
            is_hash_set::<I>()
        }
        let set: HashSet<u32> = HashSet::new();
        let mut hashed: HashSet<String, std::hash::BuildHasherDefault<std::hash::DefaultHasher>> =
            HashSet::default();
        assert!(told(&set), "{}", std::any::type_name::<&HashSet<u32>>());
        assert!(told(&mut hashed));
        assert!(told(set.clone()));
        assert!(told(
            &hashbrown::HashSet::<u32, std::hash::RandomState>::default()
        ));
        // Ordered sequences and sets, and a set's iterator, keep their order.
        assert!(!told(&vec![1u32]));
        assert!(!told(&BTreeSet::<u32>::new()));
        assert!(!told(&VecDeque::<u32>::new()));
        assert!(!told(set.iter()));
        assert!(!told([set.clone()]));
        assert!(!told(&vec![set]));
    }

    #[test]
    fn equal_hash_sets_have_one_form_nested_too() {
        let words: Vec<String> = (0..24).map(|i| format!("w{i}")).collect();
        let (a, b) = equal_sets_iterating_differently(&words);
        assert_ne!(plain(&a), plain(&b), "the sets iterate in other orders");
        assert_eq!(canonical_value(&a).unwrap(), canonical_value(&b).unwrap());
        let sorted: BTreeSet<&String> = a.iter().collect();
        assert_eq!(canonical_value(&a).unwrap(), plain(&sorted));

        #[derive(Serialize)]
        struct Order<'a> {
            id: u128,
            tags: Option<&'a HashSet<String>>,
            by_customer: BTreeMap<&'a str, Vec<&'a HashSet<String>>>,
        }
        let order = |set| Order {
            id: u128::MAX,
            tags: Some(set),
            by_customer: BTreeMap::from([("c-1", vec![set])]),
        };
        let form = canonical_value(&order(&a)).unwrap();
        assert_eq!(form, canonical_value(&order(&b)).unwrap());
        assert!(form.contains(&format!("\"id\":{}e0", u128::MAX)), "{form}");

        // Sets of sets, of numbers past 64 bits, of hashbrown's.
        let (a, b) = equal_sets_iterating_differently(&[1u128 << 100, 7, 1 << 70, 3, 5, 9, 11]);
        let sets_a = HashSet::from([vec![0u8], vec![1]]);
        assert_eq!(canonical_value(&a).unwrap(), canonical_value(&b).unwrap());
        assert_eq!(
            canonical_value(&HashMap::from([("s", a.clone())])).unwrap(),
            canonical_value(&HashMap::from([("s", b.clone())])).unwrap()
        );
        assert_eq!(canonical_value(&sets_a).unwrap(), "[[0],[1e0]]");
        let brown: hashbrown::HashSet<u128, std::hash::RandomState> = a.iter().copied().collect();
        assert_eq!(
            canonical_value(&brown).unwrap(),
            canonical_value(&b).unwrap()
        );
    }

    #[test]
    fn everything_but_hash_sets_is_todays_form() {
        #[derive(Serialize)]
        enum Kind {
            Unit,
            Newtype(i128),
            Tuple(u8, f64),
            Struct { c: char, bytes: Bytes },
        }
        /// A value serialized as bytes.
        struct Bytes(Vec<u8>);
        impl Serialize for Bytes {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(&self.0)
            }
        }
        #[derive(Serialize)]
        struct Newtype(Vec<u32>);
        #[derive(Serialize)]
        struct Unit;
        #[derive(Serialize)]
        struct Args {
            list: Vec<u32>,
            deque: VecDeque<i64>,
            ordered: BTreeSet<String>,
            map: HashMap<u64, Option<bool>>,
            kinds: Vec<Kind>,
            newtype: Newtype,
            unit: Unit,
            tuple: (i8, String, ()),
            #[serde(flatten)]
            extra: BTreeMap<String, f32>,
            #[serde(skip_serializing_if = "Option::is_none")]
            skipped: Option<u8>,
            raw: Box<RawValue>,
            big: u128,
            negative: i128,
            float: f64,
            display: std::net::Ipv4Addr,
        }
        let args = Args {
            list: vec![3, 1, 2],
            deque: VecDeque::from([-1, 5, 0]),
            ordered: ["b", "a"].map(String::from).into(),
            map: (0..20)
                .map(|i| (i * 7919, (i % 3 > 0).then_some(i % 2 == 0)))
                .collect(),
            kinds: vec![
                Kind::Unit,
                Kind::Newtype(i128::MIN),
                Kind::Tuple(7, 0.1),
                Kind::Struct {
                    c: '\u{e9}',
                    bytes: Bytes(vec![0, 255]),
                },
            ],
            newtype: Newtype(vec![2, 1]),
            unit: Unit,
            tuple: (-3, "tab\there \"q\"".into(), ()),
            extra: BTreeMap::from([("z".into(), 1.5), ("a".into(), -0.25)]),
            skipped: None,
            raw: RawValue::from_string(r#"{"b": [2, 1], "a": 1.10}"#.into()).unwrap(),
            big: u128::MAX,
            negative: i128::MIN,
            float: 1e300,
            display: std::net::Ipv4Addr::LOCALHOST,
        };
        assert_eq!(canonical_value(&args).unwrap(), plain(&args));
        // A Vec's order is part of its value.
        assert_ne!(
            canonical_value(&vec!["a", "b"]).unwrap(),
            canonical_value(&vec!["b", "a"]).unwrap()
        );
        // What serde_json refuses is refused, in a set too.
        let keys: HashMap<Vec<u8>, u8> = HashMap::from([(vec![1], 1)]);
        assert!(canonical_value(&keys).is_err());
        let bad_sets: HashSet<BTreeMap<Vec<u8>, u8>> =
            HashSet::from([BTreeMap::from([(vec![1], 1)])]);
        assert!(canonical_value(&bad_sets).is_err());
        // Too deep is refused, in a set too.
        let mut deep = serde_json::json!(1);
        for _ in 0..=crate::canonical::MAX_DEPTH {
            deep = serde_json::json!([deep]);
        }
        assert!(canonical_value(&deep).is_err());
        assert!(canonical_value(&HashSet::from([deep.to_string()])).is_ok());
    }
}

//! Deserializing untrusted documents into bounded structures: a list longer than its limit is
//! an error the moment its limit is passed, so a hostile server cannot make a client allocate
//! more than the limits allow (a `[[],[],…]` of 30 MB would otherwise be 10⁷ empty `Vec`s).
//! Used through `#[serde(deserialize_with = …)]` on the fields of [`crate::api::PartitionDoc`].

use std::fmt;
use std::marker::PhantomData;

use serde::de::{DeserializeSeed, Deserializer, Error as _, SeqAccess, Visitor};
use serde::Deserialize;

/// At most `max` elements of `T`; the capacity reserved never exceeds the limit.
struct SeqSeed<T> {
    max: usize,
    what: &'static str,
    _t: PhantomData<T>,
}

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for SeqSeed<T> {
    type Value = Vec<T>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<T>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for SeqSeed<T> {
    type Value = Vec<T>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a list of at most {} {}", self.max, self.what)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(self.max).min(4_096));
        while let Some(v) = seq.next_element()? {
            if out.len() == self.max {
                return Err(A::Error::custom(format!(
                    "more than {} {}",
                    self.max, self.what
                )));
            }
            out.push(v);
        }
        Ok(out)
    }
}

/// Rows of at most `cols` values each, at most `rows` of them.
struct RowsSeed<T> {
    rows: usize,
    cols: usize,
    what: &'static str,
    _t: PhantomData<T>,
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for RowsSeed<T> {
    type Value = Vec<Vec<T>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "at most {} {} of at most {}",
            self.rows, self.what, self.cols
        )
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(self.rows).min(4_096));
        while let Some(row) = seq.next_element_seed(SeqSeed::<T> {
            max: self.cols,
            what: "values in a row",
            _t: PhantomData,
        })? {
            if out.len() == self.rows {
                return Err(A::Error::custom(format!(
                    "more than {} {}",
                    self.rows, self.what
                )));
            }
            out.push(row);
        }
        Ok(out)
    }
}

/// A string of at most `max` bytes.
struct StrSeed {
    max: usize,
    what: &'static str,
}

impl<'de> DeserializeSeed<'de> for StrSeed {
    type Value = String;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for StrSeed {
    type Value = String;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a {} of at most {} bytes", self.what, self.max)
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
        if v.len() > self.max {
            return Err(E::custom(format!(
                "{} longer than {} bytes",
                self.what, self.max
            )));
        }
        Ok(v.to_string())
    }
}

/// A list of at most `max` strings of at most `max_len` bytes each.
struct StrsSeed {
    max: usize,
    max_len: usize,
    what: &'static str,
}

impl<'de> Visitor<'de> for StrsSeed {
    type Value = Vec<String>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a list of at most {} {}", self.max, self.what)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(self.max).min(4_096));
        while let Some(s) = seq.next_element_seed(StrSeed {
            max: self.max_len,
            what: self.what,
        })? {
            if out.len() == self.max {
                return Err(A::Error::custom(format!(
                    "more than {} {}",
                    self.max, self.what
                )));
            }
            out.push(s);
        }
        Ok(out)
    }
}

/// `deserialize_with` helper: a list of at most `max` elements.
pub fn seq<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
    max: usize,
    what: &'static str,
) -> Result<Vec<T>, D::Error> {
    d.deserialize_seq(SeqSeed {
        max,
        what,
        _t: PhantomData,
    })
}

/// `deserialize_with` helper: at most `rows` rows of at most `cols` values.
pub fn rows<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
    rows: usize,
    cols: usize,
    what: &'static str,
) -> Result<Vec<Vec<T>>, D::Error> {
    d.deserialize_seq(RowsSeed {
        rows,
        cols,
        what,
        _t: PhantomData,
    })
}

/// `deserialize_with` helper: a string of at most `max` bytes.
pub fn string<'de, D: Deserializer<'de>>(
    d: D,
    max: usize,
    what: &'static str,
) -> Result<String, D::Error> {
    StrSeed { max, what }.deserialize(d)
}

/// `deserialize_with` helper: at most `max` strings of at most `max_len` bytes.
pub fn strings<'de, D: Deserializer<'de>>(
    d: D,
    max: usize,
    max_len: usize,
    what: &'static str,
) -> Result<Vec<String>, D::Error> {
    d.deserialize_seq(StrsSeed { max, max_len, what })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Doc {
        #[serde(deserialize_with = "three")]
        xs: Vec<u32>,
        #[serde(deserialize_with = "two_by_two")]
        rows: Vec<Vec<f32>>,
        #[serde(deserialize_with = "short")]
        name: String,
    }
    fn three<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u32>, D::Error> {
        seq(d, 3, "xs")
    }
    fn two_by_two<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<f32>>, D::Error> {
        rows(d, 2, 2, "rows")
    }
    fn short<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        string(d, 4, "name")
    }

    #[test]
    fn lists_past_their_limit_are_refused() {
        let ok: Doc =
            serde_json::from_str(r#"{"xs":[1,2,3],"rows":[[1,2],[3]],"name":"abcd"}"#).unwrap();
        assert_eq!(ok.xs, vec![1, 2, 3]);
        assert_eq!(ok.rows, vec![vec![1.0, 2.0], vec![3.0]]);
        assert_eq!(ok.name, "abcd");
        for bad in [
            r#"{"xs":[1,2,3,4],"rows":[],"name":""}"#,
            r#"{"xs":[],"rows":[[],[],[]],"name":""}"#,
            r#"{"xs":[],"rows":[[1,2,3]],"name":""}"#,
            r#"{"xs":[],"rows":[],"name":"abcde"}"#,
        ] {
            let e = serde_json::from_str::<Doc>(bad).unwrap_err();
            assert!(e.to_string().contains("more than") || e.to_string().contains("longer than"));
        }
    }
}

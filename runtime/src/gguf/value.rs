//! GGUF metadata values: the thirteen value types of the GGUF key/value section and typed
//! arrays of them (spec: ggml `docs/gguf.md`, "gguf_metadata_value_type").

use std::fmt;

/// The type tag of a GGUF metadata value, with its on-disk id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    String,
    Array,
    U64,
    I64,
    F64,
}

impl ValueType {
    /// Maps an on-disk type id; `None` for ids the spec does not define.
    pub fn from_id(id: u32) -> Option<Self> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    pub fn id(self) -> u32 {
        use ValueType::*;
        match self {
            U8 => 0,
            I8 => 1,
            U16 => 2,
            I16 => 3,
            U32 => 4,
            I32 => 5,
            F32 => 6,
            Bool => 7,
            String => 8,
            Array => 9,
            U64 => 10,
            I64 => 11,
            F64 => 12,
        }
    }

    /// Bytes of one value on disk for fixed-size types; for strings and arrays the smallest
    /// possible encoding (an empty string: its u64 length; an empty array: type + length).
    pub fn min_size(self) -> usize {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }

    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "UINT8",
            I8 => "INT8",
            U16 => "UINT16",
            I16 => "INT16",
            U32 => "UINT32",
            I32 => "INT32",
            F32 => "FLOAT32",
            Bool => "BOOL",
            String => "STRING",
            Array => "ARRAY",
            U64 => "UINT64",
            I64 => "INT64",
            F64 => "FLOAT64",
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Array),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A typed array: the element type is kept even when the array is empty.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    /// Strings, packed ([`StrList`]).
    String(StrList),
    /// Nested arrays (allowed by the spec, rare in practice).
    Array(Vec<Array>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl Array {
    pub fn elem_type(&self) -> ValueType {
        match self {
            Array::U8(_) => ValueType::U8,
            Array::I8(_) => ValueType::I8,
            Array::U16(_) => ValueType::U16,
            Array::I16(_) => ValueType::I16,
            Array::U32(_) => ValueType::U32,
            Array::I32(_) => ValueType::I32,
            Array::F32(_) => ValueType::F32,
            Array::Bool(_) => ValueType::Bool,
            Array::String(_) => ValueType::String,
            Array::Array(_) => ValueType::Array,
            Array::U64(_) => ValueType::U64,
            Array::I64(_) => ValueType::I64,
            Array::F64(_) => ValueType::F64,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Value {
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// A type description such as `UINT32` or `ARRAY[STRING]`.
    pub fn type_name(&self) -> String {
        match self {
            Value::Array(a) => format!("ARRAY[{}]", a.elem_type()),
            v => v.value_type().name().to_string(),
        }
    }

    /// The value as a signed 128-bit integer, for any integer type.
    pub fn as_integer(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// The value as f64 for floating-point types.
    pub fn as_float(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl fmt::Display for Value {
    /// Short human-readable form; arrays show their type, length and first items.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::U8(v) => write!(f, "{v}"),
            Value::I8(v) => write!(f, "{v}"),
            Value::U16(v) => write!(f, "{v}"),
            Value::I16(v) => write!(f, "{v}"),
            Value::U32(v) => write!(f, "{v}"),
            Value::I32(v) => write!(f, "{v}"),
            Value::F32(v) => write!(f, "{v}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::String(v) => write!(f, "{v:?}"),
            Value::U64(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v}"),
            Value::Array(a) => {
                write!(f, "[{}; {}]", a.elem_type(), a.len())?;
                let head = |f: &mut fmt::Formatter<'_>, items: Vec<String>| {
                    if !items.is_empty() {
                        write!(f, " {}", items.join(", "))?;
                        if a.len() > items.len() {
                            write!(f, ", ...")?;
                        }
                    }
                    Ok(())
                };
                const N: usize = 4;
                let items: Vec<String> = match a {
                    Array::U8(v) => v.iter().take(N).map(|x| x.to_string()).collect(),
                    Array::I8(v) => v.iter().take(N).map(|x| x.to_string()).collect(),
                    Array::U16(v) => v.iter().take(N).map(|x| x.to_string()).collect(),
                    Array::I16(v) => v.iter().take(N).map(|x| x.to_string()).collect(),
                    Array::U32(v) => v.iter().take(N).map(|x| x.to_string()).collect(),
                    Array::I32(v) => v.iter().take(N).map(|x| x.to_string()).collect(),
                    Array::F32(v) => v.iter().take(N).map(|x| x.to_string()).collect(),
                    Array::Bool(v) => v.iter().take(N).map(|x| x.to_string()).collect(),
                    Array::String(v) => v.iter().take(N).map(|x| format!("{x:?}")).collect(),
                    Array::Array(v) => v
                        .iter()
                        .take(N)
                        .map(|x| format!("[{}; {}]", x.elem_type(), x.len()))
                        .collect(),
                    Array::U64(v) => v.iter().take(N).map(|x| x.to_string()).collect(),
                    Array::I64(v) => v.iter().take(N).map(|x| x.to_string()).collect(),
                    Array::F64(v) => v.iter().take(N).map(|x| x.to_string()).collect(),
                };
                head(f, items)
            }
        }
    }
}

/// A list of strings packed into one buffer: the bytes of every string back to back and the
/// end offset of each. A vocabulary of 262,144 pieces held as `Vec<String>` costs a 24-byte
/// header and one heap block per piece (about 12 MiB, most of it overhead); packed it is its
/// bytes plus 4 bytes per piece.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct StrList {
    bytes: String,
    ends: Vec<u32>,
}

impl StrList {
    /// An empty list with room for `n` strings.
    pub fn with_capacity(n: usize) -> Self {
        StrList {
            bytes: String::new(),
            ends: Vec::with_capacity(n),
        }
    }

    /// Appends `s`. The packed bytes are addressed by `u32`: a list whose bytes would pass
    /// 4 GiB is refused (a GGUF string array that large is not a vocabulary).
    pub fn push(&mut self, s: &str) -> std::result::Result<(), StrListFull> {
        let end = u32::try_from(self.bytes.len() + s.len()).map_err(|_| StrListFull)?;
        self.bytes.push_str(s);
        self.ends.push(end);
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The `i`-th string, if any.
    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)? as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        self.bytes.get(start..end)
    }

    /// The strings in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        (0..self.len()).map(|i| &self[i])
    }
}

/// [`StrList::push`] past 4 GiB of packed bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StrListFull;

impl std::ops::Index<usize> for StrList {
    type Output = str;

    /// The `i`-th string; panics when `i` is out of range, like indexing a slice.
    fn index(&self, i: usize) -> &str {
        // Offsets only ever come from `push`, which appends whole `&str`s, so `get` fails
        // only past the end.
        self.get(i)
            .unwrap_or_else(|| panic!("index {i} out of range for {} strings", self.len()))
    }
}

impl std::fmt::Debug for StrList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<S: AsRef<str>> FromIterator<S> for StrList {
    /// Collects strings; panics only past 4 GiB of packed bytes (test and builder use).
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Self {
        let iter = iter.into_iter();
        let mut out = StrList::with_capacity(iter.size_hint().0);
        for s in iter {
            out.push(s.as_ref()).expect("string list over 4 GiB");
        }
        out
    }
}

impl From<Vec<String>> for StrList {
    fn from(v: Vec<String>) -> Self {
        v.iter().collect()
    }
}

#[cfg(test)]
mod strlist_tests {
    use super::StrList;

    #[test]
    fn packed_strings_read_back_in_order_with_empty_and_multibyte_ones() {
        let src = ["a", "", "ccc", "▁über", "<0x0A>", ""];
        let l: StrList = src.iter().collect();
        assert_eq!(l.len(), src.len());
        for (i, s) in src.iter().enumerate() {
            assert_eq!(&l[i], *s);
            assert_eq!(l.get(i), Some(*s));
        }
        assert_eq!(l.get(src.len()), None);
        assert_eq!(l.iter().collect::<Vec<_>>(), src);
        assert_eq!(format!("{l:?}"), format!("{src:?}"));
        assert!(StrList::default().is_empty());
    }
}

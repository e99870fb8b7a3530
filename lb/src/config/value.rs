//! [`UInt`]: the configuration file's integer value type, shared by every section's file
//! types (`file`, `announce`). Its errors read `expected an integer >= 0 and <= 65535,
//! got "abc"` instead of serde's type names.
//!
//! A leaf module: it imports nothing of this crate.

use std::{fmt, marker::PhantomData};

use serde::{Deserialize, Deserializer, de};

/// An unsigned integer field with a readable error for anything else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UInt<T>(pub T);

impl<'de, T> Deserialize<'de> for UInt<T>
where
    T: TryFrom<u64> + Into<u64> + Copy + num_max::Max,
{
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UIntVisitor(PhantomData))
    }
}

struct UIntVisitor<T>(PhantomData<T>);

impl<T> UIntVisitor<T>
where
    T: TryFrom<u64> + Into<u64> + Copy + num_max::Max,
{
    fn expected() -> String {
        format!("an integer >= 0 and <= {}", T::MAX_U64)
    }

    fn fail<E: de::Error>(got: impl fmt::Display) -> E {
        E::custom(format_args!("expected {}, got {got}", Self::expected()))
    }
}

impl<'de, T> de::Visitor<'de> for UIntVisitor<T>
where
    T: TryFrom<u64> + Into<u64> + Copy + num_max::Max,
{
    type Value = UInt<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&Self::expected())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        T::try_from(v).map(UInt).map_err(|_| Self::fail(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        match u64::try_from(v) {
            Ok(v) => self.visit_u64(v),
            Err(_) => Err(Self::fail(v)),
        }
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Err(Self::fail(v))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Err(Self::fail(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Err(Self::fail(format_args!("{v:?}")))
    }

    fn visit_map<A: de::MapAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
        Err(Self::fail("a table"))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
        Err(Self::fail("an array"))
    }
}

/// The largest value of the integer types [`UInt`] accepts, as `u64`.
pub mod num_max {
    /// Implemented for `u16`, `u32`, `u64`.
    pub trait Max {
        /// `Self::MAX` as `u64`.
        const MAX_U64: u64;
    }
    impl Max for u16 {
        const MAX_U64: u64 = u16::MAX as u64;
    }
    impl Max for u32 {
        const MAX_U64: u64 = u32::MAX as u64;
    }
    impl Max for u64 {
        const MAX_U64: u64 = u64::MAX;
    }
}

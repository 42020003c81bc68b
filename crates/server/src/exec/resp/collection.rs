//! What the commands on collections share (hash.rs, list.rs): the key's item read as a
//! collection of one type, and a changed collection written back whole with its expiry.

use super::owned::{keep, Current};
use super::*;
use qs_proto::resp::collection::{self, Kind, CORRUPT, WRONGTYPE};

/// The elements of `current` (none: no key), which must be a collection of `kind`; else the
/// answer: WRONGTYPE, or an item whose value does not decode.
pub(super) fn decoded(current: Option<&Current>, kind: Kind) -> Result<Option<Vec<&[u8]>>, &'static [u8]> {
    let Some(item) = current else { return Ok(None) };
    if Kind::of_flags(item.flags) != Some(kind) {
        return Err(WRONGTYPE);
    }
    match collection::elements(&item.value) {
        Some(elements) if !elements.is_empty() => Ok(Some(elements)),
        _ => Err(CORRUPT),
    }
}

impl Engine {
    /// Writes the collection `elements` of `kind` to `key` with the expiry of its item
    /// `current` (no elements: the key goes, as redis-server deletes an emptied collection);
    /// the store's refusal, if it refused (past the item size limit).
    pub(super) fn write_elements(
        &mut self,
        (key, fd): (Key<'_>, i32),
        current: Option<&Current>,
        (kind, elements): (Kind, &[&[u8]]),
    ) -> Option<&'static [u8]> {
        if elements.is_empty() {
            if current.is_some() {
                let answer = Answer::Resp(qs_proto::command::RespReply::Deleted);
                self.delete_command(key, &qs_proto::command::Delete::default(), (answer, fd));
            }
            return None;
        }
        let bytes = elements.iter().map(|element| collection::encoded_len(element.len())).sum();
        let mut value = Vec::with_capacity(bytes);
        for element in elements {
            collection::push(&mut value, element);
        }
        let outcome = self.store_value(key, (&value, kind.flags()), (StoreMode::Set, fd), keep(current));
        reply::refused(&outcome)
    }
}

/// An array's head.
pub(super) fn array_head(len: usize, out: &mut Vec<u8>) {
    out.push(b'*');
    out.extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The indexes a random pick of a collection of `len` answers (HRANDFIELD, SRANDMEMBER,
/// ZRANDMEMBER): `count` distinct ones in a random order, or for a negative count that many,
/// each drawn anew; none from an empty collection.
pub(super) fn random_picks(len: usize, count: i64) -> Vec<usize> {
    if len == 0 {
        return Vec::new();
    }
    if count < 0 {
        return (0..count.unsigned_abs()).map(|_| super::scan::random_below(len)).collect();
    }
    let mut order: Vec<usize> = (0..len).collect();
    let wanted = (count as usize).min(len);
    for at in 0..wanted {
        order.swap(at, at + super::scan::random_below(len - at));
    }
    order.truncate(wanted);
    order
}

/// The MATCH pattern of HSCAN's, SSCAN's or ZSCAN's options (after the cursor; `None`: every
/// element), COUNT checked and read past; or the refusal.
pub(super) fn scan_pattern<'a>(
    mut options: impl Iterator<Item = &'a [u8]>,
) -> Result<Option<&'a [u8]>, &'static [u8]> {
    let mut pattern = None;
    while let Some(option) = options.next() {
        let value = options.next().ok_or(&b"-ERR syntax error\r\n"[..])?;
        if option.eq_ignore_ascii_case(b"count") {
            match qs_proto::resp::command::integer(value) {
                None => return Err(reply::NOT_INTEGER),
                Some(count) if count < 1 => return Err(b"-ERR syntax error\r\n"),
                Some(_) => {}
            }
        } else if option.eq_ignore_ascii_case(b"match") {
            pattern = (value != b"*").then_some(value);
        } else {
            return Err(b"-ERR syntax error\r\n");
        }
    }
    Ok(pattern)
}

/// Whether `element` matches a scan's `pattern` (none: every element does).
pub(super) fn scan_matches(pattern: Option<&[u8]>, element: &[u8]) -> bool {
    pattern.map_or(true, |pattern| glob::matches(pattern, element, false))
}

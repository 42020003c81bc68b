//! Redis's lists (issue 77) on the key's item, as redis-server 7.0 answers them (t_list.c):
//! the item is read, its elements decoded, changed and written back whole with its expiry,
//! at the key's owner (LMOVE and RPOPLPUSH: both keys' owner); a list left empty goes with
//! its key. Arguments redis-server reads before it looks the key up are checked first.

use super::collection::{array_head, decoded};
use super::owned::Current;
use super::*;
use qs_proto::resp::collection::{Command, Kind};
use qs_proto::resp::command::integer;

/// `ERR value is out of range, must be positive`.
const NOT_POSITIVE: &[u8] = b"-ERR value is out of range, must be positive\r\n";

impl Engine {
    /// Runs a list command on `key`, whose item is `current`, for the connection `fd`.
    pub(super) fn list_command(
        &mut self,
        (key, fd): (Key<'_>, i32),
        current: Option<Current>,
        (command, resp3): (Command<'_>, bool),
        out: &mut Vec<u8>,
    ) {
        if let Some(refusal) = refused_first(&command) {
            return out.extend_from_slice(refusal);
        }
        let items = match decoded(current.as_ref(), Kind::List) {
            Ok(items) => items,
            Err(refusal) => return out.extend_from_slice(refusal),
        };
        if command.read_only() {
            return read(command, items.as_deref(), resp3, out);
        }
        if let Some(to) = command.other_key() {
            return self.list_move((key, fd), current.as_ref(), (command, items, to), resp3, out);
        }
        let existed = items.is_some();
        let mut items = items.unwrap_or_default();
        let mut args = command.args();
        // The answer, sent once the list is written (the store may refuse it: too large).
        let mut answer = Vec::new();
        let changed = match command.name {
            "lpushx" | "rpushx" if !existed => {
                reply::integer(0, &mut answer);
                false
            }
            "lpush" | "rpush" | "lpushx" | "rpushx" => {
                for element in args {
                    if command.name.starts_with('l') {
                        items.insert(0, element);
                    } else {
                        items.push(element);
                    }
                }
                reply::integer(items.len() as i64, &mut answer);
                true
            }
            "lpop" | "rpop" => pop(&mut items, (command, existed), resp3, &mut answer),
            "lset" => {
                let index = args.next().unwrap_or_default();
                let value = args.next().unwrap_or_default();
                let at = integer(index).map(|index| position(index, items.len()));
                answer.extend_from_slice(match at {
                    _ if !existed => b"-ERR no such key\r\n",
                    None => reply::NOT_INTEGER,
                    Some(None) => b"-ERR index out of range\r\n",
                    Some(Some(at)) => {
                        items[at] = value;
                        reply::OK
                    }
                });
                matches!(at, Some(Some(_))) && existed
            }
            "linsert" => {
                let after = args.next().unwrap_or_default().eq_ignore_ascii_case(b"after");
                let (pivot, element) = (args.next().unwrap_or_default(), args.next().unwrap_or_default());
                let found = items.iter().position(|item| *item == pivot);
                if let Some(at) = found {
                    items.insert(at + usize::from(after), element);
                }
                let len = if found.is_some() {
                    items.len() as i64
                } else if existed {
                    -1
                } else {
                    0
                };
                reply::integer(len, &mut answer);
                found.is_some()
            }
            "lrem" => {
                let count = integer(args.next().unwrap_or_default()).unwrap_or_default();
                let element = args.next().unwrap_or_default();
                let removed = remove(&mut items, element, count);
                reply::integer(removed as i64, &mut answer);
                removed > 0
            }
            _ => {
                // LTRIM (its range was checked).
                let start = integer(args.next().unwrap_or_default()).unwrap_or_default();
                let end = integer(args.next().unwrap_or_default()).unwrap_or_default();
                let range = range(start, end, items.len());
                let before = items.len();
                items = range.map_or_else(Vec::new, |range| items[range].to_vec());
                answer.extend_from_slice(reply::OK);
                existed && items.len() != before
            }
        };
        let refused = if changed {
            self.write_elements((key, fd), current.as_ref(), (Kind::List, &items))
        } else {
            None
        };
        out.extend_from_slice(refused.unwrap_or(&answer));
    }

    /// LMOVE source destination LEFT|RIGHT LEFT|RIGHT and RPOPLPUSH (RIGHT, LEFT): an element
    /// of `items` (the source, at `key`) moves to the destination `to`; the element, or null
    /// for no source.
    fn list_move(
        &mut self,
        (key, fd): (Key<'_>, i32),
        current: Option<&Current>,
        (command, items, to): (Command<'_>, Option<Vec<&[u8]>>, &[u8]),
        resp3: bool,
        out: &mut Vec<u8>,
    ) {
        let Some(mut items) = items else { return out.extend_from_slice(reply::null(resp3)) };
        let mut sides = command.args().skip(1);
        let from_left =
            command.name == "lmove" && sides.next().is_some_and(|side| side.eq_ignore_ascii_case(b"left"));
        let to_left = command.name == "rpoplpush"
            || sides.next().is_some_and(|side| side.eq_ignore_ascii_case(b"left"));
        let Some(to) = self.second_key(to, out) else { return };
        if !self.owns(key.partition) {
            return out.extend_from_slice(super::owned::SPREAD);
        }
        let same = to.bytes == key.bytes;
        let target = if same { None } else { self.current(to) };
        let mut targets = match decoded(target.as_ref(), Kind::List) {
            Ok(targets) => targets.unwrap_or_default(),
            Err(refusal) => return out.extend_from_slice(refusal),
        };
        let element = if from_left { items.remove(0) } else { items.pop().unwrap_or_default() };
        let pushed = if same { &mut items } else { &mut targets };
        if to_left {
            pushed.insert(0, element);
        } else {
            pushed.push(element);
        }
        let element = element.to_vec();
        if !same {
            if let Some(refusal) = self.write_elements((to, fd), target.as_ref(), (Kind::List, &targets)) {
                return out.extend_from_slice(refusal);
            }
        }
        if let Some(refusal) = self.write_elements((key, fd), current, (Kind::List, &items)) {
            return out.extend_from_slice(refusal);
        }
        reply::bulk(&element, out);
    }
}

/// What redis-server refuses before it looks at the key: a POP's count, LRANGE's and LTRIM's
/// range, LREM's count, LINSERT's side, LPOS's options, LMOVE's sides.
fn refused_first(command: &Command<'_>) -> Option<&'static [u8]> {
    let mut args = command.args();
    let not_integer = |arg: Option<&[u8]>| integer(arg.unwrap_or_default()).is_none();
    match command.name {
        "lpop" if command.frame.argc() > 3 => Some(b"-ERR wrong number of arguments for 'lpop' command\r\n"),
        "rpop" if command.frame.argc() > 3 => Some(b"-ERR wrong number of arguments for 'rpop' command\r\n"),
        // A count that is no integer gets the same words as a negative one (redis-server's
        // getPositiveLongFromObjectOrReply).
        "lpop" | "rpop" => match args.next().map(integer) {
            Some(None) => Some(NOT_POSITIVE),
            Some(Some(count)) if count < 0 => Some(NOT_POSITIVE),
            _ => None,
        },
        "lrange" | "ltrim" => {
            (not_integer(args.next()) || not_integer(args.next())).then_some(reply::NOT_INTEGER)
        }
        "lrem" => not_integer(args.next()).then_some(reply::NOT_INTEGER),
        "linsert" => {
            let side = args.next().unwrap_or_default();
            (!side.eq_ignore_ascii_case(b"before") && !side.eq_ignore_ascii_case(b"after"))
                .then_some(b"-ERR syntax error\r\n")
        }
        "lmove" => {
            let side = |side: Option<&[u8]>| {
                side.is_some_and(|side| {
                    side.eq_ignore_ascii_case(b"left") || side.eq_ignore_ascii_case(b"right")
                })
            };
            let mut sides = args.skip(1);
            (!side(sides.next()) || !side(sides.next())).then_some(b"-ERR syntax error\r\n")
        }
        "lpos" => lpos_options(command).err(),
        _ => None,
    }
}

/// LPOP and RPOP (their count checked): the element, or up to `count` of them.
fn pop(
    items: &mut Vec<&[u8]>,
    (command, existed): (Command<'_>, bool),
    resp3: bool,
    answer: &mut Vec<u8>,
) -> bool {
    let count = command.args().next().map(|count| integer(count).unwrap_or_default());
    let left = command.name == "lpop";
    match (existed, count) {
        (false, None) => answer.extend_from_slice(reply::null(resp3)),
        (false, Some(_)) => answer.extend_from_slice(if resp3 { b"_\r\n" } else { b"*-1\r\n" }),
        (true, Some(0)) => answer.extend_from_slice(b"*0\r\n"),
        (true, None) => {
            let element = if left { items.remove(0) } else { items.pop().unwrap_or_default() };
            reply::bulk(element, answer);
        }
        (true, Some(count)) => {
            let taken = (count as usize).min(items.len());
            array_head(taken, answer);
            let popped: Vec<&[u8]> = if left {
                items.drain(..taken).collect()
            } else {
                items.drain(items.len() - taken..).rev().collect()
            };
            for element in popped {
                reply::bulk(element, answer);
            }
        }
    }
    existed && count != Some(0)
}

/// Removes `element` from `items`: `count` of them from the head (negative: from the tail;
/// 0: all). How many went.
fn remove(items: &mut Vec<&[u8]>, element: &[u8], count: i64) -> usize {
    let wanted = if count == 0 { usize::MAX } else { count.unsigned_abs() as usize };
    let mut removed = 0;
    let mut keep = |item: &&[u8]| {
        let goes = *item == element && removed < wanted;
        removed += usize::from(goes);
        !goes
    };
    if count < 0 {
        items.reverse();
        items.retain(&mut keep);
        items.reverse();
    } else {
        items.retain(keep);
    }
    removed
}

/// The index `index` (negative: from the end) of a list of `len`, if it is in it.
fn position(index: i64, len: usize) -> Option<usize> {
    let at = if index < 0 { index.checked_add(len as i64)? } else { index };
    usize::try_from(at).ok().filter(|&at| at < len)
}

/// The elements from `start` to `end` (inclusive, negative from the end) of a list of `len`,
/// as redis-server's range reply picks them; `None` when none.
fn range(start: i64, end: i64, len: usize) -> Option<std::ops::Range<usize>> {
    let len = len as i64;
    let start = if start < 0 { start.saturating_add(len).max(0) } else { start };
    let end = if end < 0 { end.saturating_add(len) } else { end.min(len - 1) };
    (start <= end && start < len).then(|| start as usize..end as usize + 1)
}

/// The commands that only read (`items`: the list, none for a missing key).
fn read(command: Command<'_>, items: Option<&[&[u8]]>, resp3: bool, out: &mut Vec<u8>) {
    let list = items.unwrap_or_default();
    let mut args = command.args();
    match command.name {
        "llen" => reply::integer(list.len() as i64, out),
        "lrange" => {
            let start = integer(args.next().unwrap_or_default()).unwrap_or_default();
            let end = integer(args.next().unwrap_or_default()).unwrap_or_default();
            let picked = range(start, end, list.len()).map_or(&[][..], |range| &list[range]);
            array_head(picked.len(), out);
            for element in picked {
                reply::bulk(element, out);
            }
        }
        "lindex" => match (items, integer(args.next().unwrap_or_default())) {
            (None, _) => out.extend_from_slice(reply::null(resp3)),
            (Some(_), None) => out.extend_from_slice(reply::NOT_INTEGER),
            (Some(list), Some(index)) => match position(index, list.len()) {
                Some(at) => reply::bulk(list[at], out),
                None => out.extend_from_slice(reply::null(resp3)),
            },
        },
        _ => lpos(command, items, resp3, out),
    }
}

/// LPOS's options: (rank, count, maxlen); count -1 when not given.
fn lpos_options(command: &Command<'_>) -> Result<(i64, i64, i64), &'static [u8]> {
    let (mut rank, mut count, mut maxlen) = (1, -1, 0);
    let mut options = command.args().skip(1);
    while let Some(option) = options.next() {
        let is = |name: &[u8]| option.eq_ignore_ascii_case(name);
        // COUNT's and MAXLEN's words for a value that is no integer are those for a negative
        // one (redis-server's getPositiveLongFromObjectOrReply).
        let (count_words, maxlen_words): (&[u8], &[u8]) =
            (b"-ERR COUNT can't be negative\r\n", b"-ERR MAXLEN can't be negative\r\n");
        let value = match options.clone().next() {
            Some(value) if is(b"rank") || is(b"count") || is(b"maxlen") => {
                options.next();
                let words = if is(b"count") {
                    count_words
                } else if is(b"maxlen") {
                    maxlen_words
                } else {
                    reply::NOT_INTEGER
                };
                integer(value).ok_or(words)?
            }
            _ => return Err(b"-ERR syntax error\r\n"),
        };
        if is(b"rank") {
            if value == 0 {
                return Err(b"-ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list\r\n");
            }
            if value == i64::MIN {
                return Err(b"-ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807\r\n");
            }
            rank = value;
        } else if is(b"count") {
            count = if value < 0 { return Err(count_words) } else { value };
        } else {
            maxlen = if value < 0 { return Err(maxlen_words) } else { value };
        }
    }
    Ok((rank, count, maxlen))
}

/// LPOS key element [RANK r] [COUNT c] [MAXLEN m] (its options were checked).
fn lpos(command: Command<'_>, items: Option<&[&[u8]]>, resp3: bool, out: &mut Vec<u8>) {
    let (rank, count, maxlen) = lpos_options(&command).unwrap_or((1, -1, 0));
    let element = command.args().next().unwrap_or_default();
    let Some(list) = items else {
        return out.extend_from_slice(if count != -1 { b"*0\r\n" } else { reply::null(resp3) });
    };
    let len = list.len();
    let scanned = if maxlen == 0 { len } else { (maxlen as usize).min(len) };
    let order: Box<dyn Iterator<Item = usize>> =
        if rank < 0 { Box::new((0..len).rev().take(scanned)) } else { Box::new(0..scanned) };
    let skip = rank.unsigned_abs() as usize - 1;
    let mut found = order.filter(|&at| list[at] == element).skip(skip);
    if count == -1 {
        return match found.next() {
            Some(at) => reply::integer(at as i64, out),
            None => out.extend_from_slice(reply::null(resp3)),
        };
    }
    let matches: Vec<usize> = if count == 0 { found.collect() } else { found.take(count as usize).collect() };
    array_head(matches.len(), out);
    for at in matches {
        reply::integer(at as i64, out);
    }
}

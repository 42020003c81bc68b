//! Redis's sets (issue 77) on the key's item, as redis-server 7.0 answers them (t_set.c): the
//! item is read, its members decoded, changed and written back whole with its expiry, at the
//! key's owner; a set left empty goes with its key. SINTER, SUNION, SDIFF and their STORE
//! forms read their other keys where they lie (through CREW's readers on another worker's),
//! SMOVE writes two keys one worker owns.
//!
//! Members keep redis-server's order where it has one: a set of integers only (at most
//! `set-max-intset-entries` of them), its intset, is in ascending order; any other set is in
//! the order its members came, where redis-server's hashtable has an order of its own.

use super::collection::{array_head, decoded, random_picks, scan_matches, scan_pattern};
use super::owned::Current;
use super::*;
use qs_proto::resp::collection::{Command, Kind};
use qs_proto::resp::command::integer;
use std::collections::HashSet;

/// `ERR value is out of range, must be positive`.
const NOT_POSITIVE: &[u8] = b"-ERR value is out of range, must be positive\r\n";
/// The most members a negative SRANDMEMBER count answers (each may repeat).
const RANDOM_MEMBERS_MAX: u64 = 1 << 20;

impl Engine {
    /// Runs a set command on `key`, whose item is `current`, for the connection `fd`.
    pub(super) fn set_command(
        &mut self,
        (key, fd): (Key<'_>, i32),
        current: Option<Current>,
        (command, resp3): (Command<'_>, bool),
        out: &mut Vec<u8>,
    ) {
        if let Some(refusal) = refused_first(&command) {
            return out.extend_from_slice(refusal);
        }
        if command.many_keys() {
            return self.set_algebra((key, fd), current, (command, resp3), out);
        }
        let members = match decoded(current.as_ref(), Kind::Set) {
            Ok(members) => members,
            Err(refusal) => return out.extend_from_slice(refusal),
        };
        if command.read_only() {
            return read(command, members.as_deref(), resp3, out);
        }
        if let Some(to) = command.other_key() {
            return self.set_move((key, fd), current.as_ref(), (command, members, to), out);
        }
        let existed = members.is_some();
        let mut members = members.unwrap_or_default();
        let mut answer = Vec::new();
        let changed = match command.name {
            "sadd" => {
                let added = add(&mut members, command.args());
                reply::integer(added as i64, &mut answer);
                added > 0
            }
            "srem" => {
                let gone: HashSet<&[u8]> = command.args().collect();
                let before = members.len();
                members.retain(|member| !gone.contains(member));
                reply::integer((before - members.len()) as i64, &mut answer);
                before != members.len()
            }
            _ => {
                // SPOP (its count was checked).
                let count = command.args().next().map(|count| integer(count).unwrap_or_default());
                match (existed, count) {
                    (false, None) => answer.extend_from_slice(reply::null(resp3)),
                    (false, Some(_)) | (true, Some(0)) => set_head(0, resp3, &mut answer),
                    (true, None) => {
                        reply::bulk(members.swap_remove(scan::random_below(members.len())), &mut answer)
                    }
                    (true, Some(count)) => {
                        let taken = (count as usize).min(members.len());
                        set_head(taken, resp3, &mut answer);
                        for _ in 0..taken {
                            let member = members.swap_remove(scan::random_below(members.len()));
                            reply::bulk(member, &mut answer);
                        }
                    }
                }
                existed && count != Some(0)
            }
        };
        let ordered = in_order(members, self.intset_max());
        let refused = if changed {
            self.write_elements((key, fd), current.as_ref(), (Kind::Set, &ordered))
        } else {
            None
        };
        out.extend_from_slice(refused.unwrap_or(&answer));
    }

    /// `set-max-intset-entries` as CONFIG SET last set it.
    fn intset_max(&self) -> usize {
        usize::try_from(self.shared.encoding_settings[2].load(std::sync::atomic::Ordering::Relaxed))
            .unwrap_or(0)
    }

    /// SMOVE source destination member: `:1` when it moved.
    fn set_move(
        &mut self,
        (key, fd): (Key<'_>, i32),
        current: Option<&Current>,
        (command, members, to): (Command<'_>, Option<Vec<&[u8]>>, &[u8]),
        out: &mut Vec<u8>,
    ) {
        let member = command.args().nth(1).unwrap_or_default();
        let Some(to) = self.second_key(to, out) else { return };
        if !self.owns(key.partition) {
            return out.extend_from_slice(super::owned::SPREAD);
        }
        // No source: 0, before the destination's type is looked at.
        let Some(mut members) = members else { return reply::integer(0, out) };
        let same = to.bytes == key.bytes;
        let target = if same { None } else { self.current(to) };
        let targets = match decoded(target.as_ref(), Kind::Set) {
            Ok(targets) => targets,
            Err(refusal) => return out.extend_from_slice(refusal),
        };
        let Some(at) = members.iter().position(|candidate| *candidate == member) else {
            return reply::integer(0, out);
        };
        if same {
            return reply::integer(1, out);
        }
        members.remove(at);
        let mut targets = targets.unwrap_or_default();
        if !targets.contains(&member) {
            targets.push(member);
            let targets = in_order(targets, self.intset_max());
            if let Some(refusal) = self.write_elements((to, fd), target.as_ref(), (Kind::Set, &targets)) {
                return out.extend_from_slice(refusal);
            }
        }
        if let Some(refusal) = self.write_elements((key, fd), current, (Kind::Set, &members)) {
            return out.extend_from_slice(refusal);
        }
        reply::integer(1, out);
    }

    /// SINTER, SUNION, SDIFF and their STORE forms (`key`: the first key, or the
    /// destination; `current`: its item).
    fn set_algebra(
        &mut self,
        (key, fd): (Key<'_>, i32),
        current: Option<Current>,
        (command, resp3): (Command<'_>, bool),
        out: &mut Vec<u8>,
    ) {
        let store = command.name.ends_with("store");
        let sources = command.keys().skip(usize::from(store));
        let mut items: Vec<Option<Current>> = Vec::new();
        for (at, source) in sources.enumerate() {
            if at == 0 && !store {
                items.push(current.as_ref().map(|item| Current { value: item.value.clone(), ..*item }));
                continue;
            }
            let source = self.key(source, None);
            let readable = self.owns(source.partition)
                || self.crew && self.shared.map.reader(source.partition).is_some();
            if !readable {
                return out
                    .extend_from_slice(b"-ERR keys of other workers are read only with --access crew\r\n");
            }
            items.push(self.current(source));
        }
        let mut sets = Vec::with_capacity(items.len());
        for item in &items {
            match decoded(item.as_ref(), Kind::Set) {
                Ok(members) => sets.push(members),
                Err(refusal) => return out.extend_from_slice(refusal),
            }
        }
        let result = combine(command.name.trim_end_matches("store"), &sets);
        let result = in_order(result, self.intset_max());
        if !store {
            set_head(result.len(), resp3, out);
            for member in result {
                reply::bulk(member, out);
            }
            return;
        }
        if result.is_empty() {
            if current.is_some() {
                let answer = Answer::Resp(qs_proto::command::RespReply::Deleted);
                self.delete_command(key, &qs_proto::command::Delete::default(), (answer, fd));
            }
            return reply::integer(0, out);
        }
        // The destination is set anew: no expiry, as redis-server's setKey leaves it.
        match self.write_elements((key, fd), None, (Kind::Set, &result)) {
            Some(refusal) => out.extend_from_slice(refusal),
            None => reply::integer(result.len() as i64, out),
        }
    }
}

/// What redis-server refuses before it looks at the key: SPOP's and SRANDMEMBER's counts,
/// SSCAN's cursor.
fn refused_first(command: &Command<'_>) -> Option<&'static [u8]> {
    let mut args = command.args();
    match command.name {
        "spop" if command.frame.argc() > 3 => Some(b"-ERR syntax error\r\n"),
        "spop" => match args.next().map(integer) {
            Some(None) => Some(NOT_POSITIVE),
            Some(Some(count)) if count < 0 => Some(NOT_POSITIVE),
            _ => None,
        },
        "srandmember" if command.frame.argc() > 3 => Some(b"-ERR syntax error\r\n"),
        "srandmember" => match args.next().map(integer) {
            Some(None) => Some(reply::NOT_INTEGER),
            Some(Some(i64::MIN)) => {
                Some(b"-ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807\r\n")
            }
            Some(Some(count)) if count < 0 && count.unsigned_abs() > RANDOM_MEMBERS_MAX => {
                Some(b"-ERR a negative count answers at most 1048576 members here\r\n")
            }
            _ => None,
        },
        "sscan" => std::str::from_utf8(args.next().unwrap_or_default())
            .ok()
            .and_then(|text| text.parse::<u64>().ok())
            .is_none()
            .then_some(b"-ERR invalid cursor\r\n"),
        _ => None,
    }
}

/// Adds the members of `args` not in `members` yet: how many were new.
fn add<'v>(members: &mut Vec<&'v [u8]>, args: impl Iterator<Item = &'v [u8]>) -> usize {
    let mut present: HashSet<&[u8]> = members.iter().copied().collect();
    let before = members.len();
    for member in args {
        if present.insert(member) {
            members.push(member);
        }
    }
    members.len() - before
}

/// `members` in the order redis-server keeps them in: ascending where they are all integers
/// and at most `intset_max` (its intset), else as they are.
fn in_order(mut members: Vec<&[u8]>, intset_max: usize) -> Vec<&[u8]> {
    if members.len() <= intset_max {
        let numbers: Option<Vec<i64>> = members.iter().map(|member| integer(member)).collect();
        if let Some(numbers) = numbers {
            let mut pairs: Vec<(i64, &[u8])> = numbers.into_iter().zip(members).collect();
            pairs.sort_unstable_by_key(|&(number, _)| number);
            members = pairs.into_iter().map(|(_, member)| member).collect();
        }
    }
    members
}

/// SINTER's, SUNION's or SDIFF's members of `sets` (a missing key: `None`, an empty set).
fn combine<'v>(op: &str, sets: &[Option<Vec<&'v [u8]>>]) -> Vec<&'v [u8]> {
    fn of<'s, 'v>(set: &'s Option<Vec<&'v [u8]>>) -> &'s [&'v [u8]] {
        set.as_deref().unwrap_or(&[])
    }
    match op {
        "sinter" => {
            if sets.iter().any(Option::is_none) {
                return Vec::new();
            }
            let others: Vec<HashSet<&[u8]>> =
                sets[1..].iter().map(|set| of(set).iter().copied().collect()).collect();
            of(&sets[0])
                .iter()
                .copied()
                .filter(|member| others.iter().all(|other| other.contains(member)))
                .collect()
        }
        "sunion" => {
            let mut union = Vec::new();
            add(&mut union, sets.iter().flat_map(|set| of(set).iter().copied()));
            union
        }
        _ => {
            let others: HashSet<&[u8]> = sets[1..].iter().flat_map(|set| of(set).iter().copied()).collect();
            of(&sets[0]).iter().copied().filter(|member| !others.contains(member)).collect()
        }
    }
}

/// The head of a set reply: RESP3's set, RESP2's array.
fn set_head(len: usize, resp3: bool, out: &mut Vec<u8>) {
    if resp3 {
        out.push(b'~');
        out.extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
        out.extend_from_slice(b"\r\n");
    } else {
        array_head(len, out);
    }
}

/// The commands on one key that only read (`members`: the set, none for a missing key).
fn read(command: Command<'_>, members: Option<&[&[u8]]>, resp3: bool, out: &mut Vec<u8>) {
    let set = members.unwrap_or_default();
    let mut args = command.args();
    let has = |member: &[u8]| set.contains(&member);
    match command.name {
        "smembers" => {
            set_head(set.len(), resp3, out);
            for member in set {
                reply::bulk(member, out);
            }
        }
        "sismember" => reply::integer(i64::from(has(args.next().unwrap_or_default())), out),
        "smismember" => {
            array_head(command.frame.argc() - 2, out);
            for member in args {
                reply::integer(i64::from(has(member)), out);
            }
        }
        "scard" => reply::integer(set.len() as i64, out),
        "srandmember" => random_members(members, args.next().and_then(integer), resp3, out),
        // A missing key's scan is answered before its options are read, as redis-server does.
        _ if members.is_none() => out.extend_from_slice(b"*2\r\n$1\r\n0\r\n*0\r\n"),
        _ => scan(set, args.skip(1), out),
    }
}

/// SRANDMEMBER: one member (no count: a bulk string, or null for no key), `count` distinct
/// ones, or (a negative count) that many, each drawn anew.
fn random_members(members: Option<&[&[u8]]>, count: Option<i64>, resp3: bool, out: &mut Vec<u8>) {
    let set = members.unwrap_or_default();
    let Some(count) = count else {
        return match set.len() {
            0 => out.extend_from_slice(reply::null(resp3)),
            len => reply::bulk(set[scan::random_below(len)], out),
        };
    };
    let picks = random_picks(set.len(), count);
    array_head(picks.len(), out);
    for at in picks {
        reply::bulk(set[at], out);
    }
}

/// SSCAN: every member in one answer (cursor 0); MATCH filters them, COUNT is checked.
fn scan<'a>(set: &[&[u8]], options: impl Iterator<Item = &'a [u8]>, out: &mut Vec<u8>) {
    let pattern = match scan_pattern(options) {
        Ok(pattern) => pattern,
        Err(refusal) => return out.extend_from_slice(refusal),
    };
    let matching: Vec<&&[u8]> = set.iter().filter(|member| scan_matches(pattern, member)).collect();
    out.extend_from_slice(b"*2\r\n$1\r\n0\r\n");
    array_head(matching.len(), out);
    for member in matching {
        reply::bulk(member, out);
    }
}

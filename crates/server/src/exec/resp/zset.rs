//! Redis's sorted sets (issue 77) on the key's item, as redis-server 7.0 answers them
//! (t_zset.c): the item is read, its members and scores decoded (each member followed by its
//! score's eight bytes, in score order then member order), changed and written back whole with
//! its expiry, at the key's owner; a sorted set left empty goes with its key. Arguments
//! redis-server reads before it looks the key up are checked first.

use super::collection::{array_head, decoded, random_picks, scan_matches, scan_pattern};
use super::owned::Current;
use super::*;
use crate::script::convert::g17;
use qs_proto::resp::collection::{Command, Kind, CORRUPT};
use qs_proto::resp::command::integer;

/// A member and its score.
type Entry<'v> = (f64, &'v [u8]);
/// A sorted set as read: (score, member), in order.
type Entries<'v> = Vec<Entry<'v>>;
/// A test of a member against a bound.
type Test<'t> = &'t dyn Fn(&[u8]) -> bool;

const NOT_FLOAT: &[u8] = b"-ERR value is not a valid float\r\n";
const SCORE_RANGE: &[u8] = b"-ERR min or max is not a float\r\n";
const LEX_RANGE: &[u8] = b"-ERR min or max not valid string range item\r\n";
const SYNTAX: &[u8] = b"-ERR syntax error\r\n";

/// A bound of a score range (`(` excludes it).
#[derive(Clone, Copy)]
struct ScoreBound(f64, bool);

/// A bound of a lex range: `-`, `+`, `[member` or `(member`.
#[derive(Clone, Copy)]
enum LexBound<'a> {
    Min,
    Max,
    At(&'a [u8], bool),
}

/// What a range names.
#[derive(Clone, Copy)]
enum Range<'a> {
    Rank(i64, i64),
    Score(ScoreBound, ScoreBound),
    Lex(LexBound<'a>, LexBound<'a>),
}

/// A range read and its options.
struct RangeAsk<'a> {
    range: Range<'a>,
    rev: bool,
    limit: Option<(i64, i64)>,
    scores: bool,
}

impl Engine {
    /// Runs a sorted-set command on `key`, whose item is `current`, for the connection `fd`.
    pub(super) fn zset_command(
        &mut self,
        (key, fd): (Key<'_>, i32),
        current: Option<Current>,
        (command, resp3): (Command<'_>, bool),
        out: &mut Vec<u8>,
    ) {
        let asked = match asked(&command) {
            Ok(asked) => asked,
            Err(refusal) => return out.extend_from_slice(refusal),
        };
        let zadd = match command.name {
            "zadd" | "zincrby" => match zadd_asked(&command) {
                Ok(zadd) => Some(zadd),
                Err(refusal) => return out.extend_from_slice(refusal),
            },
            _ => None,
        };
        let entries = match decoded(current.as_ref(), Kind::Zset) {
            Ok(elements) => match elements.map(|elements| entries_of(&elements)) {
                Some(None) => return out.extend_from_slice(CORRUPT),
                entries => entries.flatten(),
            },
            Err(refusal) => return out.extend_from_slice(refusal),
        };
        if command.read_only() {
            return read(command, (entries.as_deref(), asked), resp3, out);
        }
        let existed = entries.is_some();
        let mut entries = entries.unwrap_or_default();
        let mut answer = Vec::new();
        let changed = match command.name {
            "zadd" | "zincrby" => {
                match zadd.as_ref().map(|zadd| add(&mut entries, zadd, existed, resp3, &mut answer)) {
                    Some(Ok(changed)) => changed,
                    Some(Err(refusal)) => return out.extend_from_slice(refusal),
                    None => false,
                }
            }
            "zrem" => {
                let before = entries.len();
                let gone: Vec<&[u8]> = command.args().collect();
                entries.retain(|(_, member)| !gone.contains(member));
                reply::integer((before - entries.len()) as i64, &mut answer);
                before != entries.len()
            }
            "zpopmin" | "zpopmax" => pop(&mut entries, (&command, existed), resp3, &mut answer),
            _ => {
                // ZREMRANGEBYRANK, ZREMRANGEBYSCORE, ZREMRANGEBYLEX.
                let picked = asked.map(|asked| picked(&entries, &asked)).unwrap_or_default();
                let before = entries.len();
                let mut at = 0;
                entries.retain(|_| {
                    at += 1;
                    !picked.contains(&(at - 1))
                });
                reply::integer((before - entries.len()) as i64, &mut answer);
                before != entries.len()
            }
        };
        let refused = if changed {
            let scores: Vec<[u8; 8]> = entries.iter().map(|(score, _)| score.to_be_bytes()).collect();
            let elements: Vec<&[u8]> =
                entries.iter().zip(&scores).flat_map(|((_, member), score)| [*member, &score[..]]).collect();
            self.write_elements((key, fd), current.as_ref(), (Kind::Zset, &elements))
        } else {
            None
        };
        out.extend_from_slice(refused.unwrap_or(&answer));
    }
}

/// A sorted set's elements as (score, member), or `None` if they are not members and scores.
fn entries_of<'v>(elements: &[&'v [u8]]) -> Option<Entries<'v>> {
    if elements.len() % 2 == 1 {
        return None;
    }
    elements
        .chunks_exact(2)
        .map(|pair| Some((f64::from_be_bytes(pair[1].try_into().ok()?), pair[0])))
        .collect()
}

/// A score as redis-server reads one for ZADD and ZINCRBY: as [`bound_score`], but neither
/// empty nor where strtod overflows or underflows to zero (getDoubleFromObject's ERANGE).
fn score(text: &[u8]) -> Option<f64> {
    if text.is_empty() {
        return None;
    }
    let value = bound_score(text)?;
    let spelled_infinite =
        std::str::from_utf8(text).is_ok_and(|text| text.to_ascii_lowercase().contains("inf"));
    let nonzero = text.iter().take_while(|&&b| b != b'e' && b != b'E').any(|b| (b'1'..=b'9').contains(b));
    let out_of_range = (value.is_infinite() && !spelled_infinite) || (value == 0.0 && nonzero);
    (!out_of_range).then_some(value)
}

/// A score as redis-server's strtod reads a range's bound (the empty string is 0; `inf` and
/// its kin are infinities, and so is a number too large); `None` for anything else or NaN.
fn bound_score(text: &[u8]) -> Option<f64> {
    if text.is_empty() {
        return Some(0.0);
    }
    let text = std::str::from_utf8(text).ok()?;
    if text.starts_with(char::is_whitespace) || text.ends_with(char::is_whitespace) {
        return None;
    }
    let value: f64 = match text.to_ascii_lowercase().trim_start_matches('+') {
        "inf" | "infinity" => f64::INFINITY,
        "-inf" | "-infinity" => f64::NEG_INFINITY,
        other if other.contains("nan") || other.contains("inf") => return None,
        _ => text.parse().ok()?,
    };
    (!value.is_nan()).then_some(value)
}

fn score_bound(text: &[u8]) -> Option<ScoreBound> {
    match text.strip_prefix(b"(") {
        Some(rest) => Some(ScoreBound(bound_score(rest)?, true)),
        None => Some(ScoreBound(bound_score(text)?, false)),
    }
}

fn lex_bound(text: &[u8]) -> Option<LexBound<'_>> {
    match text.first()? {
        b'-' if text.len() == 1 => Some(LexBound::Min),
        b'+' if text.len() == 1 => Some(LexBound::Max),
        b'[' => Some(LexBound::At(&text[1..], false)),
        b'(' => Some(LexBound::At(&text[1..], true)),
        _ => None,
    }
}

/// The range a range command asks for, read as redis-server reads it before the key is looked
/// up; `None` for the commands that ask none. Also every other check redis-server makes first.
fn asked<'a>(command: &Command<'a>) -> Result<Option<RangeAsk<'a>>, &'static [u8]> {
    let mut args = command.args();
    let name = command.name;
    let (kind, rev) = match name {
        "zrange" => ("auto", false),
        "zrevrange" => ("rank", true),
        "zrangebyscore" | "zcount" | "zremrangebyscore" => ("score", false),
        "zrevrangebyscore" => ("score", true),
        "zrangebylex" | "zlexcount" | "zremrangebylex" => ("lex", false),
        "zrevrangebylex" => ("lex", true),
        "zremrangebyrank" => ("rank", false),
        "zpopmin" | "zpopmax" => {
            if command.frame.argc() > 3 {
                return Err(SYNTAX);
            }
            return match args.next().map(integer) {
                Some(None) | Some(Some(..=-1)) => Err(b"-ERR value is out of range, must be positive\r\n"),
                _ => Ok(None),
            };
        }
        "zrandmember" => return random_asked(command).map(|_| None),
        "zscan" => {
            let cursor = std::str::from_utf8(args.next().unwrap_or_default())
                .ok()
                .and_then(|text| text.parse::<u64>().ok());
            return if cursor.is_none() { Err(b"-ERR invalid cursor\r\n") } else { Ok(None) };
        }
        _ => return Ok(None),
    };
    let (first, second) = (args.next().unwrap_or_default(), args.next().unwrap_or_default());
    let (mut kind, mut rev, mut limit, mut scores) = (kind, rev, None, false);
    let ranged =
        !matches!(name, "zcount" | "zlexcount" | "zremrangebyscore" | "zremrangebylex" | "zremrangebyrank");
    while let Some(option) = args.next().filter(|_| ranged) {
        let is = |word: &[u8]| option.eq_ignore_ascii_case(word);
        if is(b"withscores") && !name.contains("bylex") {
            scores = true;
        } else if is(b"limit") && args.clone().count() >= 2 && name != "zrevrange" {
            let (offset, count) = (args.next().and_then(integer), args.next().and_then(integer));
            let (Some(offset), Some(count)) = (offset, count) else { return Err(reply::NOT_INTEGER) };
            limit = Some((offset, count));
        } else if name == "zrange" && is(b"rev") && !rev {
            rev = true;
        } else if name == "zrange" && kind == "auto" && is(b"bylex") {
            kind = "lex";
        } else if name == "zrange" && kind == "auto" && is(b"byscore") {
            kind = "score";
        } else {
            return Err(SYNTAX);
        }
    }
    if kind == "auto" {
        kind = "rank";
    }
    // A count of -1 is no limit (redis-server's default), so it passes with a rank range.
    if limit.is_some_and(|(_, count)| count != -1) && kind == "rank" {
        return Err(
            b"-ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX\r\n",
        );
    }
    if scores && kind == "lex" {
        return Err(b"-ERR syntax error, WITHSCORES not supported in combination with BYLEX\r\n");
    }
    // A reversed score or lex range names its maximum first.
    let (min, max) = if rev && kind != "rank" { (second, first) } else { (first, second) };
    let range = match kind {
        "rank" => match (integer(min), integer(max)) {
            (Some(start), Some(end)) => Range::Rank(start, end),
            _ => return Err(reply::NOT_INTEGER),
        },
        "score" => match (score_bound(min), score_bound(max)) {
            (Some(min), Some(max)) => Range::Score(min, max),
            _ => return Err(SCORE_RANGE),
        },
        _ => match (lex_bound(min), lex_bound(max)) {
            (Some(min), Some(max)) => Range::Lex(min, max),
            _ => return Err(LEX_RANGE),
        },
    };
    Ok(Some(RangeAsk { range, rev, limit, scores }))
}

/// The indexes of `entries` a range picks, in the order they are answered.
fn picked(entries: &[(f64, &[u8])], asked: &RangeAsk<'_>) -> Vec<usize> {
    let len = entries.len();
    let mut picks: Vec<usize> = match asked.range {
        Range::Rank(start, end) => {
            let len = len as i64;
            let start = if start < 0 { (start + len).max(0) } else { start };
            let end = if end < 0 { end + len } else { end.min(len - 1) };
            if start > end || start >= len {
                return Vec::new();
            }
            let (start, end) = (start as usize, end as usize);
            if asked.rev {
                (len as usize - 1 - end..=len as usize - 1 - start).rev().collect()
            } else {
                (start..=end).collect()
            }
        }
        Range::Score(min, max) => {
            let inside = |score: f64| {
                (if min.1 { score > min.0 } else { score >= min.0 })
                    && (if max.1 { score < max.0 } else { score <= max.0 })
            };
            (0..len).filter(|&at| inside(entries[at].0)).collect()
        }
        // As redis-server walks a lex range (meant for members of one score): from the first
        // member past the minimum (the last under the maximum, reversed), while in range.
        Range::Lex(min, max) => return lex_walk(entries, (min, max), asked.rev, asked.limit),
    };
    if asked.rev && !matches!(asked.range, Range::Rank(..)) {
        picks.reverse();
    }
    // A rank range takes no LIMIT (one with a count of -1 passes, and changes nothing).
    if let Some((offset, count)) = asked.limit.filter(|_| !matches!(asked.range, Range::Rank(..))) {
        if offset < 0 {
            return Vec::new();
        }
        let taken = if count < 0 { usize::MAX } else { count as usize };
        picks = picks.into_iter().skip(offset as usize).take(taken).collect();
    }
    picks
}

fn lex_above(member: &[u8], min: LexBound<'_>) -> bool {
    match min {
        LexBound::Min => true,
        LexBound::Max => false,
        LexBound::At(bound, exclusive) => {
            if exclusive {
                member > bound
            } else {
                member >= bound
            }
        }
    }
}

fn lex_below(member: &[u8], max: LexBound<'_>) -> bool {
    match max {
        LexBound::Min => false,
        LexBound::Max => true,
        LexBound::At(bound, exclusive) => {
            if exclusive {
                member < bound
            } else {
                member <= bound
            }
        }
    }
}

/// The indexes a lex range picks, walked as redis-server walks it: the first member at or past
/// the minimum (reversed: the last at or under the maximum) starts it if it is also within the
/// other bound; LIMIT's offset skips members unchecked; then members are taken while within
/// the far bound.
fn lex_walk(
    entries: &[(f64, &[u8])],
    (min, max): (LexBound<'_>, LexBound<'_>),
    rev: bool,
    limit: Option<(i64, i64)>,
) -> Vec<usize> {
    let order: Vec<usize> =
        if rev { (0..entries.len()).rev().collect() } else { (0..entries.len()).collect() };
    let (near, far): (Test<'_>, Test<'_>) = if rev {
        (&|member| lex_below(member, max), &|member| lex_above(member, min))
    } else {
        (&|member| lex_above(member, min), &|member| lex_below(member, max))
    };
    let Some(start) = order.iter().position(|&at| near(entries[at].1)) else { return Vec::new() };
    if !far(entries[order[start]].1) {
        return Vec::new();
    }
    let (offset, count) = limit.unwrap_or((0, -1));
    if offset < 0 {
        return Vec::new();
    }
    let taken = if count < 0 { usize::MAX } else { count as usize };
    order[start..]
        .iter()
        .skip(offset as usize)
        .take(taken)
        .take_while(|&&at| far(entries[at].1))
        .copied()
        .collect()
}

/// A score as redis-server replies one: a bulk string of `%.17g` (RESP3: a double).
fn push_score(score: f64, resp3: bool, out: &mut Vec<u8>) {
    let text = g17(score);
    if resp3 {
        out.push(b',');
        out.extend_from_slice(text.as_bytes());
        out.extend_from_slice(b"\r\n");
    } else {
        reply::bulk(text.as_bytes(), out);
    }
}

/// Members (with their scores if `scores`: RESP2 flat, RESP3 a pair each).
fn push_entries(entries: &[(f64, &[u8])], picks: &[usize], scores: bool, resp3: bool, out: &mut Vec<u8>) {
    array_head(picks.len() * if scores && !resp3 { 2 } else { 1 }, out);
    for &at in picks {
        if scores && resp3 {
            out.extend_from_slice(b"*2\r\n");
        }
        reply::bulk(entries[at].1, out);
        if scores {
            push_score(entries[at].0, resp3, out);
        }
    }
}

/// Puts (score, member) in its place, in score order then member order.
fn insert<'v>(entries: &mut Entries<'v>, entry: (f64, &'v [u8])) {
    let at = entries.partition_point(|&(score, member)| (score, member) < entry);
    entries.insert(at, entry);
}

/// ZADD's options and its score-member pairs, read as redis-server reads them before it
/// looks the key up (ZINCRBY: INCR and one pair).
struct Zadd<'v> {
    nx: bool,
    xx: bool,
    ch: bool,
    incr: bool,
    gt: bool,
    lt: bool,
    pairs: Vec<(f64, &'v [u8])>,
}

fn zadd_asked<'v>(command: &Command<'v>) -> Result<Zadd<'v>, &'static [u8]> {
    let words: Vec<&[u8]> = command.args().collect();
    let mut asked = Zadd {
        nx: false,
        xx: false,
        ch: false,
        incr: command.name == "zincrby",
        gt: false,
        lt: false,
        pairs: Vec::new(),
    };
    let mut at = 0;
    while command.name == "zadd" && at < words.len() {
        let is = |word: &[u8]| words[at].eq_ignore_ascii_case(word);
        match () {
            _ if is(b"nx") => asked.nx = true,
            _ if is(b"xx") => asked.xx = true,
            _ if is(b"ch") => asked.ch = true,
            _ if is(b"incr") => asked.incr = true,
            _ if is(b"gt") => asked.gt = true,
            _ if is(b"lt") => asked.lt = true,
            _ => break,
        }
        at += 1;
    }
    let pairs = &words[at..];
    if pairs.len() % 2 == 1 || pairs.is_empty() {
        return Err(SYNTAX);
    }
    let Zadd { nx, xx, gt, lt, incr, .. } = asked;
    if nx && xx {
        return Err(b"-ERR XX and NX options at the same time are not compatible\r\n");
    }
    if (gt || lt) && nx || (gt && lt) {
        return Err(b"-ERR GT, LT, and/or NX options at the same time are not compatible\r\n");
    }
    if incr && pairs.len() > 2 {
        return Err(b"-ERR INCR option supports a single increment-element pair\r\n");
    }
    for pair in pairs.chunks_exact(2) {
        asked.pairs.push((score(pair[0]).ok_or(NOT_FLOAT)?, pair[1]));
    }
    Ok(asked)
}

/// ZADD and ZINCRBY (`asked`, read first) on `entries`: whether the set changed.
fn add<'v>(
    entries: &mut Entries<'v>,
    asked: &Zadd<'v>,
    existed: bool,
    resp3: bool,
    answer: &mut Vec<u8>,
) -> Result<bool, &'static [u8]> {
    let Zadd { nx, xx, ch, incr, gt, lt, .. } = *asked;
    let (mut added, mut updated, mut processed, mut last) = (0, 0, 0, 0.0);
    if existed || !xx {
        for &(given, member) in &asked.pairs {
            let found = entries.iter().position(|&(_, candidate)| candidate == member);
            let Some(found) = found else {
                if !xx {
                    insert(entries, (given, member));
                    (added, processed, last) = (added + 1, processed + 1, given);
                }
                continue;
            };
            if nx {
                continue;
            }
            let current = entries[found].0;
            let new = if incr { current + given } else { given };
            if new.is_nan() {
                return Err(b"-ERR resulting score is not a number (NaN)\r\n");
            }
            if (lt && new >= current) || (gt && new <= current) {
                continue;
            }
            (processed, last) = (processed + 1, new);
            if new != current {
                entries.remove(found);
                insert(entries, (new, member));
                updated += 1;
            }
        }
    }
    match (incr, processed) {
        (true, 0) => answer.extend_from_slice(reply::null(resp3)),
        (true, _) => push_score(last, resp3, answer),
        (false, _) => reply::integer(if ch { added + updated } else { added }, answer),
    }
    Ok(added + updated > 0)
}

/// ZPOPMIN and ZPOPMAX (their count checked): whether the set changed.
fn pop(
    entries: &mut Entries<'_>,
    (command, existed): (&Command<'_>, bool),
    resp3: bool,
    answer: &mut Vec<u8>,
) -> bool {
    let count = command.args().next().map(|count| integer(count).unwrap_or_default());
    if !existed || count == Some(0) {
        answer.extend_from_slice(b"*0\r\n");
        return false;
    }
    let taken = count.map_or(1, |count| (count as usize).min(entries.len()));
    let popped: Entries<'_> = if command.name == "zpopmin" {
        entries.drain(..taken).collect()
    } else {
        entries.drain(entries.len() - taken..).rev().collect()
    };
    let nested = resp3 && count.is_some();
    array_head(if nested { taken } else { taken * 2 }, answer);
    for (score, member) in popped {
        if nested {
            answer.extend_from_slice(b"*2\r\n");
        }
        reply::bulk(member, answer);
        push_score(score, resp3, answer);
    }
    true
}

/// The commands that only read (`entries`: the set, none for a missing key; `asked`: the
/// range a range command asks for).
fn read(
    command: Command<'_>,
    (entries, asked): (Option<&[Entry<'_>]>, Option<RangeAsk<'_>>),
    resp3: bool,
    out: &mut Vec<u8>,
) {
    let set = entries.unwrap_or_default();
    let mut args = command.args();
    let score_of =
        |member: &[u8]| set.iter().find(|&&(_, candidate)| candidate == member).map(|&(score, _)| score);
    match command.name {
        "zcard" => reply::integer(set.len() as i64, out),
        "zscore" => match score_of(args.next().unwrap_or_default()) {
            Some(score) => push_score(score, resp3, out),
            None => out.extend_from_slice(reply::null(resp3)),
        },
        "zmscore" => {
            array_head(command.frame.argc() - 2, out);
            for member in args {
                match score_of(member) {
                    Some(score) => push_score(score, resp3, out),
                    None => out.extend_from_slice(reply::null(resp3)),
                }
            }
        }
        "zrank" | "zrevrank" => {
            let member = args.next().unwrap_or_default();
            match set.iter().position(|&(_, candidate)| candidate == member) {
                Some(at) if command.name == "zrank" => reply::integer(at as i64, out),
                Some(at) => reply::integer((set.len() - 1 - at) as i64, out),
                None => out.extend_from_slice(reply::null(resp3)),
            }
        }
        "zcount" | "zlexcount" => {
            reply::integer(asked.map_or(0, |asked| picked(set, &asked).len()) as i64, out);
        }
        "zrandmember" => {
            random_members(entries, (args.next().and_then(integer), args.next().is_some()), resp3, out)
        }
        "zscan" if entries.is_none() => out.extend_from_slice(b"*2\r\n$1\r\n0\r\n*0\r\n"),
        "zscan" => scan(set, args.skip(1), out),
        _ => {
            let Some(asked) = asked else { return out.extend_from_slice(b"*0\r\n") };
            let picks = picked(set, &asked);
            push_entries(set, &picks, asked.scores, resp3, out);
        }
    }
}

/// ZRANDMEMBER's count and WITHSCORES, checked as redis-server checks them before it looks
/// the key up.
fn random_asked(command: &Command<'_>) -> Result<(), &'static [u8]> {
    let mut args = command.args();
    let Some(count) = args.next() else { return Ok(()) };
    let count = integer(count).ok_or(reply::NOT_INTEGER)?;
    if count == i64::MIN {
        return Err(b"-ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807\r\n");
    }
    match args.next() {
        Some(option) if !option.eq_ignore_ascii_case(b"withscores") || args.next().is_some() => Err(SYNTAX),
        Some(_) if !(-i64::MAX / 2..=i64::MAX / 2).contains(&count) => Err(b"-ERR value is out of range\r\n"),
        _ if count < 0 && count.unsigned_abs() > 1 << 20 => {
            Err(b"-ERR a negative count answers at most 1048576 members here\r\n")
        }
        _ => Ok(()),
    }
}

/// ZRANDMEMBER: one member (no count: a bulk string, or null for no key), `count` distinct
/// ones, or (a negative count) that many, each drawn anew; with their scores if asked.
fn random_members(
    entries: Option<&[Entry<'_>]>,
    (count, scores): (Option<i64>, bool),
    resp3: bool,
    out: &mut Vec<u8>,
) {
    let set = entries.unwrap_or_default();
    let Some(count) = count else {
        return match set.len() {
            0 => out.extend_from_slice(reply::null(resp3)),
            len => reply::bulk(set[scan::random_below(len)].1, out),
        };
    };
    let picks = random_picks(set.len(), count);
    push_entries(set, &picks, scores, resp3, out);
}

/// ZSCAN: every member and its score in one answer (cursor 0); MATCH filters the members.
fn scan<'a>(set: &[(f64, &[u8])], options: impl Iterator<Item = &'a [u8]>, out: &mut Vec<u8>) {
    let pattern = match scan_pattern(options) {
        Ok(pattern) => pattern,
        Err(refusal) => return out.extend_from_slice(refusal),
    };
    let matching: Vec<&(f64, &[u8])> =
        set.iter().filter(|(_, member)| scan_matches(pattern, member)).collect();
    out.extend_from_slice(b"*2\r\n$1\r\n0\r\n");
    array_head(matching.len() * 2, out);
    for (score, member) in matching {
        reply::bulk(member, out);
        reply::bulk(g17(*score).as_bytes(), out);
    }
}

//! `-o front_cache` under EREW with RESP: a worker answers repeated GETs of another worker's
//! keys from its front cache, never a value older than an acknowledged write, never an item
//! past its expiry, and a text `get` only from a reply that carries the item's flags.

mod common;

use common::resp::{call, connect, frame, quicksilver};
use common::{reads_never_go_back, stat, Client};
use std::time::Duration;

const FRONT: &[&str] = &["-t", "2", "--access", "erew", "-o", "front_cache"];

/// A GET's value over RESP, `None` for a miss.
fn resp_get(client: &mut Client, key: &str) -> Option<Vec<u8>> {
    let reply = call(client, &frame(&["GET", key]));
    if reply == b"$-1\r\n" {
        return None;
    }
    let start = reply.iter().position(|&byte| byte == b'\n').expect("a bulk string") + 1;
    Some(reply[start..reply.len() - 2].to_vec())
}

#[test]
fn resp_gets_come_from_the_front_cache_and_never_older_than_an_acknowledged_set() {
    let (server, port) = quicksilver(FRONT);
    let mut writer = connect(port);
    call(&mut writer, &frame(&["SET", "celebrity", "0"]));
    // SO_REUSEPORT spreads connections over the workers: some land on the one that does not
    // own the key.
    let readers = (0..16).map(|_| connect(port)).collect();
    let write = |version: u64| {
        assert_eq!(call(&mut writer, &frame(&["SET", "celebrity", &version.to_string()])), b"+OK\r\n");
    };
    let reads = reads_never_go_back(readers, |client| resp_get(client, "celebrity"), (2000, write));
    assert!(reads > 1000, "{reads} reads");
    let mut client = server.connect();
    let (hits, gets) = (stat(&mut client, "get_hits"), stat(&mut client, "cmd_get"));
    assert_eq!(hits, gets, "every GET hit, front hits counted");
    assert!(stat(&mut client, "front_cache_hits") > 0, "nothing served from the front cache");
}

/// A reply kept for a RESP GET has no flags: a text `get` is never answered from one. One kept
/// for a text `get` answers a RESP GET (its value, without the flags RESP does not show).
#[test]
fn a_text_get_is_answered_with_its_flags_and_a_resp_get_from_either_reply() {
    let (server, port) = quicksilver(FRONT);
    let mut text = server.connect();
    assert_eq!(text.call(b"set flagged 7 0 5\r\nhello\r\n"), b"STORED\r\n");
    let mut resp: Vec<Client> = (0..16).map(|_| connect(port)).collect();
    let mut texts: Vec<Client> = (0..16).map(|_| server.connect()).collect();
    for _ in 0..20 {
        for client in &mut resp {
            assert_eq!(resp_get(client, "flagged").as_deref(), Some(&b"hello"[..]));
        }
        for client in &mut texts {
            assert_eq!(client.call(b"get flagged\r\n"), b"VALUE flagged 7 5\r\nhello\r\nEND\r\n");
        }
    }
    assert!(stat(&mut text, "front_cache_hits") > 0, "nothing served from the front cache");
}

/// `-o front_cache` under EREW: a worker's front cache keeps the owner's reply to the end of
/// its second, so the owner does not tag one of an item that expires within that second (a
/// Redis expiry may); every text get after the expiry misses, on both workers.
#[test]
fn the_front_cache_never_serves_an_item_past_its_millisecond_expiry() {
    let (server, port) = quicksilver(FRONT);
    let mut resp = connect(port);
    // 16 connections: SO_REUSEPORT puts some on the worker that does not own the key.
    let mut readers: Vec<Client> = (0..16).map(|_| server.connect()).collect();
    for round in 0..6u64 {
        let unix_ms =
            || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
        let ends = unix_ms() as u64 + 150 + round * 70;
        call(&mut resp, &frame(&["SET", "brief", "v", "PXAT", &ends.to_string()]));
        while (unix_ms() as u64) + 5 < ends {
            for reader in &mut readers {
                reader.call(b"get brief\r\n");
            }
        }
        while (unix_ms() as u64) <= ends + 2 {
            std::thread::sleep(Duration::from_millis(1));
        }
        for reader in &mut readers {
            assert_eq!(reader.call(b"get brief\r\n"), b"END\r\n", "round {round}: served past its expiry");
        }
    }
}

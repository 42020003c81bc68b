//! The configuration parsers over arbitrary text: a memcached.conf file (--config-file), the
//! `-l` listener specs and an auth file (-Y, MEMCACHED_SASL_PWDB). Invariants: no panic; a
//! file's options parse or are refused with a message; an auth file's entries check true.
#![no_main]

use clap::Parser;
use libfuzzer_sys::fuzz_target;
use qs_server::config::{file, listen, Config, Protocol};
use qs_server::session::auth::Passwords;

fuzz_target!(|input: &[u8]| {
    if let Some(passwords) = Passwords::parse(input) {
        // Every entry of the file logs in; a wrong password for the first does not.
        let first = input.split(|&byte| byte == b'\n').find(|line| !line.is_empty());
        if let Some(line) = first.filter(|line| line.len() < 255 && !line.contains(&b'\r')) {
            let colon = line.iter().position(|&byte| byte == b':').expect("parsed");
            let (user, password) = (&line[..colon], &line[colon + 1..]);
            assert!(passwords.check(user, password), "an entry of the file does not log in");
            let mut wrong = password.to_vec();
            wrong.push(b'!');
            let other = input.split(|&byte| byte == b'\n').any(|l| l.ends_with(&wrong));
            assert!(other || !passwords.check(user, &wrong), "a wrong password logs in");
        }
    }
    let Ok(text) = std::str::from_utf8(input) else { return };
    if let Ok(options) = file::options_in(text, std::path::Path::new("fuzz.conf")) {
        let args = std::iter::once("quicksilver".to_string()).chain(options);
        if let Ok(config) = Config::try_parse_from(args) {
            let _ = config.validate();
        }
    }
    // Listener specs built from the bytes: every prefix and address form, ports in and out of
    // range (never a name: it would be looked up in DNS).
    let specs: Vec<String> = input.chunks(8).map(spec_from).collect();
    let _ = listen::plan(&specs, 11211, 0, Protocol::Auto);
});

/// A `-l` spec from up to eight bytes: a prefix, an address (v4, v6 or `*`), a port.
fn spec_from(bytes: &[u8]) -> String {
    const PREFIXES: [&str; 7] =
        ["", "proto[ascii]:", "proto[binary]:", "proto[negotiating]:", "notls:", "mtls:", "tag[t]:"];
    let byte = |at: usize| bytes.get(at).copied().unwrap_or(0);
    let prefix = PREFIXES[usize::from(byte(0)) % PREFIXES.len()];
    let v4 = std::net::Ipv4Addr::new(byte(1), byte(2), byte(3), byte(4));
    let v6 = std::net::Ipv6Addr::from(u128::from(u32::from(v4)) << 64 | u128::from(byte(5)));
    let port = i32::from(u16::from_be_bytes([byte(5), byte(6)])) - i32::from(byte(7) & 1);
    match byte(7) % 6 {
        0 => format!("{prefix}{v4}"),
        1 => format!("{prefix}{v4}:{port}"),
        2 => format!("{prefix}[{v6}]:{port}"),
        3 => format!("{prefix}{v6}"),
        4 => format!("{prefix}*:{port}"),
        _ => format!("{prefix}[{v6}"),
    }
}

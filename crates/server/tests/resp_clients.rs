//! CLIENT LIST, INFO and KILL, RESET, SHUTDOWN, DEBUG, COMMAND, MEMORY and OBJECT on
//! quicksilver's RESP listener against redis-server 7.0: the
//! errors byte for byte, the lines field for field, and a kill ends the connection it names
//! wherever its worker is.

mod common;

use common::resp::{call, connect, frame, quicksilver, same_replies, same_replies_after, Redis};
use common::Client;
use std::io::Read;

#[test]
fn client_list_and_kill_forms_and_errors_answer_as_redis_server_does() {
    let requests: Vec<Vec<u8>> = [
        &["CLIENT", "LIST", "ID", "x"][..],
        &["CLIENT", "LIST", "FOO"],
        &["CLIENT", "LIST", "TYPE"],
        &["CLIENT", "LIST", "TYPE", "bogus"],
        &["CLIENT", "LIST", "TYPE", "pubsub"],
        &["CLIENT", "LIST", "TYPE", "master"],
        &["CLIENT", "LIST", "ID", "99999", "99998"],
        &["CLIENT", "INFO", "x"],
        &["CLIENT", "KILL"],
        &["CLIENT", "KILL", "ID", "x"],
        &["CLIENT", "KILL", "ID", "0"],
        &["CLIENT", "KILL", "ID"],
        &["CLIENT", "KILL", "FOO", "bar"],
        &["CLIENT", "KILL", "SKIPME", "maybe"],
        &["CLIENT", "KILL", "1.2.3.4:5"],
        &["CLIENT", "KILL", "ID", "99999"],
        &["CLIENT", "KILL", "ADDR", "1.2.3.4:5", "SKIPME", "no"],
        &["CLIENT", "KILL", "TYPE", "pubsub"],
        &["CLIENT", "KILL", "TYPE", "bogus"],
        &["CLIENT", "KILL", "USER", "nobody"],
    ]
    .iter()
    .map(|args| frame(args))
    .collect();
    same_replies(&requests);
}

/// The `name=value` fields of a CLIENT LIST or INFO reply's line for the connection named
/// `name` (CLIENT LIST may still list a connection another worker has not yet seen close:
/// each round names its connection its own way), and the line.
fn fields(reply: &[u8], name: &str) -> (Vec<String>, String) {
    let text = String::from_utf8_lossy(reply).into_owned();
    let body = text.split_once("\r\n").expect("a length line").1;
    let body = body.strip_prefix("txt:").unwrap_or(body);
    let line = body
        .lines()
        .find(|line| line.contains(&format!(" name={name} ")))
        .expect("the named connection's line")
        .to_owned();
    let names = line.split(' ').map(|field| field.split('=').next().unwrap_or_default().to_owned()).collect();
    (names, line)
}

#[test]
fn client_list_and_info_carry_redis_servers_fields_in_its_order() {
    let redis = Redis::start();
    let (_server, port) = quicksilver(&["-t", "4"]);
    for version in ["2", "3"] {
        let (mut theirs, mut ours) = (connect(redis.port), connect(port));
        let name = format!("web-{version}");
        for client in [&mut theirs, &mut ours] {
            call(client, &frame(&["HELLO", version, "SETNAME", &name]));
        }
        for request in [&["CLIENT", "INFO"][..], &["CLIENT", "LIST"]] {
            let (want, _) = fields(&call(&mut theirs, &frame(request)), &name);
            let (got, got_line) = fields(&call(&mut ours, &frame(request)), &name);
            assert_eq!(got, want, "{request:?}: {got_line}");
            assert_eq!(&got_line[..3], "id=");
            for field in [&format!("name={name} ")[..], "flags=N db=0 ", "user=default redir=-1 "] {
                assert!(got_line.contains(field), "{field} in {got_line}");
            }
            assert!(got_line.ends_with(&format!("resp={version}")), "{got_line}");
        }
    }
}

/// Waits for `client`'s connection to end (what it had been sent before is dropped).
fn ended(client: &mut Client) -> bool {
    let mut rest = Vec::new();
    client.stream.read_to_end(&mut rest).is_ok()
}

#[test]
fn client_kill_ends_the_connections_it_names_on_any_worker() {
    let (_server, port) = quicksilver(&["-t", "4"]);
    let mut admin = connect(port);
    // Connections accepted by different workers.
    let mut victims: Vec<Client> = (0..6).map(|_| connect(port)).collect();
    let ids: Vec<String> = victims
        .iter_mut()
        .map(|victim| {
            let reply = String::from_utf8(call(victim, &frame(&["CLIENT", "ID"]))).expect("text");
            reply.trim_start_matches(':').trim_end().to_owned()
        })
        .collect();
    let listed = String::from_utf8(call(&mut admin, &frame(&["CLIENT", "LIST"]))).expect("text");
    for id in &ids {
        assert!(listed.contains(&format!("id={id} addr=")), "{id} in {listed}");
    }
    for (victim, id) in victims.iter_mut().zip(&ids).take(3) {
        assert_eq!(call(&mut admin, &frame(&["CLIENT", "KILL", "ID", id])), b":1\r\n");
        assert!(ended(victim), "connection {id} still open");
    }
    // A connection killed is not listed, even before its worker has closed it.
    let listed = String::from_utf8(call(&mut admin, &frame(&["CLIENT", "LIST"]))).expect("text");
    for id in &ids[..3] {
        assert!(!listed.contains(&format!("id={id} addr=")), "{id} in {listed}");
    }
    // The old form names a peer address and answers +OK.
    let addr = {
        let line = String::from_utf8(call(&mut victims[3], &frame(&["CLIENT", "INFO"]))).expect("text");
        line.split(' ').find_map(|field| field.strip_prefix("addr=")).expect("addr").to_owned()
    };
    assert_eq!(call(&mut admin, &frame(&["CLIENT", "KILL", &addr])), b"+OK\r\n");
    assert!(ended(&mut victims[3]));
    assert_eq!(call(&mut admin, &frame(&["CLIENT", "KILL", &addr])), b"-ERR No such client\r\n");
    // SKIPME yes (the default) spares the asking connection; every other goes.
    assert_eq!(call(&mut admin, &frame(&["CLIENT", "KILL", "TYPE", "normal"])), b":2\r\n");
    for victim in &mut victims[4..] {
        assert!(ended(victim));
    }
    // SKIPME no: the asking connection is answered, then closed.
    admin.send(&frame(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "no"]));
    let mut rest = Vec::new();
    admin.stream.read_to_end(&mut rest).expect("read to close");
    assert_eq!(rest, b":1\r\n");
}

#[test]
fn reset_shutdown_and_debug_forms_answer_as_redis_server_does() {
    let requests: Vec<Vec<u8>> = [
        &["CLIENT", "SETNAME", "web"][..],
        &["RESET"],
        &["CLIENT", "GETNAME"],
        &["GET", "missing"],
        &["RESET", "x"],
        &["DEBUG"],
        &["DEBUG", "FOO"],
        &["DEBUG", "SLEEP", "1"],
        &["SHUTDOWN", "FOO"],
        &["SHUTDOWN", "ABORT"],
        &["SHUTDOWN", "NOSAVE", "SAVE"],
        &["SHUTDOWN", "NOW", "FORCE", "ABORT"],
    ]
    .iter()
    .map(|args| frame(args))
    .collect();
    // RESET after HELLO 3: RESP2's null again.
    same_replies_after(Some("3"), &requests);
    // Test suites wait on DEBUG SLEEP 0, which redis-server answers with DEBUG enabled.
    let (_server, port) = quicksilver(&[]);
    assert_eq!(call(&mut connect(port), &frame(&["DEBUG", "SLEEP", "0"])), b"+OK\r\n");
}

#[test]
fn reset_asks_for_authentication_again_where_a_password_is_set() {
    let users = common::resp::users_file("resp-reset");
    let (_server, port) = quicksilver(&["-t", "2", "-Y", users.to_str().expect("path")]);
    let mut client = connect(port);
    // In one write: what follows RESET meets the gate.
    let mut request = frame(&["AUTH", "app", "pw"]);
    for args in
        [&["SET", "k", "v"][..], &["RESET"], &["GET", "k"], &["RESET"], &["AUTH", "app", "pw"], &["GET", "k"]]
    {
        request.extend_from_slice(&frame(args));
    }
    client.send(&request);
    let want = "+OK\r\n+OK\r\n+RESET\r\n-NOAUTH Authentication required.\r\n+RESET\r\n+OK\r\n$1\r\nv\r\n";
    assert_eq!(String::from_utf8_lossy(&client.read_until(b"$1\r\nv\r\n")), want);
}

#[test]
fn shutdown_stops_the_server_under_memcacheds_dash_a_only() {
    let (_server, port) = quicksilver(&[]);
    let mut client = connect(port);
    assert_eq!(
        call(&mut client, &frame(&["SHUTDOWN"])),
        b"-ERR shutdown not enabled (memcached's -A allows it)\r\n"
    );
    let (mut server, port) = quicksilver(&["-A"]);
    let mut client = connect(port);
    client.send(&frame(&["SHUTDOWN", "NOSAVE"]));
    let mut rest = Vec::new();
    client.stream.read_to_end(&mut rest).expect("read to close");
    assert!(rest.is_empty(), "{rest:?}");
    let status = server.wait_exit(std::time::Duration::from_secs(10));
    assert!(status.is_some_and(|status| status.success()), "{status:?}");
}

/// COMMAND and COMMAND INFO: every command served is described as redis-server 7.0 describes
/// it (its flags, key positions, ACL categories, tips and key specs), in RESP2 and RESP3; the
/// commands with subcommands list none here, as only some of theirs are served.
#[test]
fn command_info_describes_the_commands_served_as_redis_server_does() {
    let served = call(&mut connect(quicksilver(&[]).1), &frame(&["COMMAND"]));
    let count: usize = String::from_utf8_lossy(&served[1..served.iter().position(|&b| b == b'\r').unwrap()])
        .parse()
        .expect("a count");
    let names: Vec<String> = String::from_utf8_lossy(&served)
        .split("*10\r\n$")
        .skip(1)
        .map(|entry| entry.split("\r\n").nth(1).expect("a name").to_owned())
        .collect();
    assert_eq!(names.len(), count);
    let with_subcommands = ["client", "config", "command", "function", "memory", "object", "script"];
    let mut requests: Vec<Vec<u8>> = names
        .iter()
        .filter(|name| !with_subcommands.contains(&name.as_str()))
        .map(|name| frame(&["COMMAND", "INFO", name]))
        .collect();
    for args in [
        &["COMMAND", "INFO", "GET", "nosuch", "set"][..],
        &["COMMAND", "COUNT", "x"],
        &["COMMAND", "FOO"],
        &["COMMAND", "COUNT"],
    ] {
        requests.push(frame(args));
    }
    let count_reply = requests.len() - 1;
    let (without_count, count_request) = requests.split_at(count_reply);
    same_replies_after(None, without_count);
    same_replies_after(Some("3"), without_count);
    // redis-server serves 240 commands; quicksilver counts those it serves.
    assert_eq!(
        call(&mut connect(quicksilver(&[]).1), &count_request[0]),
        format!(":{count}\r\n").into_bytes()
    );
}

/// MEMORY USAGE and OBJECT IDLETIME / FREQ: checked, and answered for a key there or not, as
/// redis-server answers them (MEMORY USAGE's figure is this server's own: its item's bytes).
#[test]
fn memory_usage_and_object_answer_as_redis_server_does() {
    let requests: Vec<Vec<u8>> = [
        &["SET", "mk", "hello"][..],
        &["MEMORY", "USAGE", "nokey"],
        &["MEMORY", "USAGE", "nokey", "SAMPLES", "5"],
        &["MEMORY", "USAGE", "mk", "SAMPLES", "x"],
        &["MEMORY", "USAGE", "mk", "SAMPLES", "-1"],
        &["MEMORY", "USAGE", "mk", "SAMPLES"],
        &["MEMORY", "USAGE", "mk", "FOO", "1"],
        &["MEMORY", "USAGE"],
        &["MEMORY", "FOO"],
        &["MEMORY"],
        &["OBJECT", "IDLETIME", "mk"],
        &["OBJECT", "IDLETIME", "nokey"],
        &["OBJECT", "FREQ", "mk"],
        &["OBJECT", "FREQ", "nokey"],
        &["OBJECT", "FOO", "mk"],
        &["OBJECT", "IDLETIME"],
        &["OBJECT", "IDLETIME", "mk", "x"],
        &["OBJECT"],
    ]
    .iter()
    .map(|args| frame(args))
    .collect();
    same_replies(&requests);
    let (_server, port) = quicksilver(&[]);
    let mut client = connect(port);
    call(&mut client, &frame(&["SET", "mk", "hello"]));
    // 16 bytes of header, then key and value in one word.
    assert_eq!(call(&mut client, &frame(&["MEMORY", "USAGE", "mk"])), b":24\r\n");
    // An expiry adds the extension word; one within a second, the precise word too.
    call(&mut client, &frame(&["EXPIREAT", "mk", "4102444800"]));
    assert_eq!(call(&mut client, &frame(&["MEMORY", "USAGE", "mk"])), b":32\r\n");
    call(&mut client, &frame(&["PEXPIREAT", "mk", "4102444800123"]));
    assert_eq!(call(&mut client, &frame(&["MEMORY", "USAGE", "mk"])), b":40\r\n");
}

/// A connection's id is never another's, even where its descriptor is reused: a stale CLIENT
/// KILL ID finds nothing, and HELLO answers the same id as CLIENT ID.
#[test]
fn client_ids_are_never_reused() {
    for threads in ["1", "2"] {
        let (_server, port) = quicksilver(&["-t", threads]);
        let mut admin = connect(port);
        let id_of = |client: &mut Client| {
            let reply = String::from_utf8(call(client, &frame(&["CLIENT", "ID"]))).expect("text");
            reply.trim_start_matches(':').trim_end().parse::<u64>().expect("an id")
        };
        let mut seen = std::collections::HashSet::new();
        let mut last = None;
        for _ in 0..20 {
            let mut client = connect(port);
            let id = id_of(&mut client);
            assert!(seen.insert(id), "id {id} given twice");
            let hello = call(&mut client, &frame(&["HELLO", "2"]));
            assert!(String::from_utf8_lossy(&hello).contains(&format!("$2\r\nid\r\n:{id}\r\n")));
            last = Some((client, id));
        }
        let (mut newest, newest_id) = last.expect("a client");
        let stale = *seen.iter().filter(|&&id| id != newest_id).min().expect("an old id");
        assert_eq!(call(&mut admin, &frame(&["CLIENT", "KILL", "ID", &stale.to_string()])), b":0\r\n");
        assert_eq!(id_of(&mut newest), newest_id, "the newest client still answers");
    }
}

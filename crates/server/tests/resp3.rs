//! RESP3 (`HELLO 3`) on quicksilver's RESP listener against redis-server 7.0 on loopback:
//! the same requests to both after the handshake, the replies compared byte for byte.

mod common;

use common::resp::{call, connect, frame, quicksilver, same_replies_after};
use common::Client;

fn requests(list: &[&[&str]]) -> Vec<Vec<u8>> {
    list.iter().map(|args| frame(args)).collect()
}

#[test]
fn after_hello_3_nulls_and_maps_are_resp3s() {
    let mut list: Vec<Vec<&str>> = Vec::new();
    // Keys spread over the workers: sets handed to their owners answer RESP3's null there.
    let keys: Vec<String> = (0..12).map(|n| format!("k{n}")).collect();
    for key in &keys {
        list.push(vec!["GET", key]);
        list.push(vec!["SET", key, "v", "XX"]);
        list.push(vec!["SET", key, "v", "NX"]);
        list.push(vec!["SET", key, "w", "NX"]);
        list.push(vec!["SET", key, "x", "GET"]);
        list.push(vec!["GETDEL", key]);
        list.push(vec!["GETDEL", key]);
        list.push(vec!["SET", key, "y", "GET"]);
        list.push(vec!["GETEX", key, "EX", "100"]);
        list.push(vec!["TTL", key]);
    }
    let tail: [&[&str]; 10] = [
        &["MGET", "k1", "nothing", "k2", "k3"],
        &["GETSET", "fresh", "1"],
        &["INCR", "fresh"],
        &["EXISTS", "k1", "nothing"],
        &["CONFIG", "GET", "maxmemory"],
        &["CONFIG", "GET", "nothing-here"],
        &["CLIENT", "GETNAME"],
        &["CLIENT", "SETNAME", "web"],
        &["CLIENT", "GETNAME"],
        &["GET", "k5", "extra"],
    ];
    list.extend(tail.iter().map(|args| args.to_vec()));
    let list: Vec<&[&str]> = list.iter().map(Vec::as_slice).collect();
    same_replies_after(Some("3"), &requests(&list));
}

#[test]
fn hello_2_after_hello_3_goes_back_to_resp2() {
    let list: [&[&str]; 6] = [
        &["GET", "missing"],
        &["HELLO", "2"],
        &["GET", "missing"],
        &["MGET", "a", "b"],
        &["HELLO", "3"],
        &["MGET", "a", "b"],
    ];
    let mut requests = requests(&list);
    requests.push(frame(&["HELLO", "3"]));
    same_replies_after(None, &requests);
}

#[test]
fn a_pipeline_after_hello_3_in_one_write_is_answered_in_resp3() {
    for workers in ["1", "4"] {
        let (_server, port) = quicksilver(&["-t", workers]);
        let mut client = connect(port);
        let mut request = frame(&["HELLO", "3"]);
        for key in ["a", "b", "c", "d", "e", "f"] {
            request.extend_from_slice(&frame(&["GET", key]));
            request.extend_from_slice(&frame(&["GETDEL", key]));
        }
        request.extend_from_slice(&frame(&["MGET", "a", "b"]));
        let reply = call(&mut client, &request);
        let text = String::from_utf8_lossy(&reply);
        assert!(text.starts_with("%7\r\n"), "{text}");
        let after = &text[text.find("*0\r\n").expect("modules") + 4..];
        assert_eq!(after, format!("{}*2\r\n_\r\n_\r\n", "_\r\n".repeat(12)), "{workers} workers");
    }
}

#[test]
fn info_is_verbatim_text_and_command_docs_an_empty_map_in_resp3() {
    let (_server, port) = quicksilver(&[]);
    let mut client = connect(port);
    call(&mut client, &frame(&["HELLO", "3"]));
    let info = call(&mut client, &frame(&["INFO", "keyspace"]));
    let text = String::from_utf8_lossy(&info);
    let (head, body) = text.split_once("\r\n").expect("a length line");
    assert!(head.starts_with('=') && body.starts_with("txt:# Keyspace\r\n"), "{text}");
    assert_eq!(head[1..].parse::<usize>().expect("a length"), body.len() - 2, "{text}");
    assert_eq!(call(&mut client, &frame(&["COMMAND", "DOCS"])), b"%0\r\n");
}

#[test]
fn hello_3_with_auth_before_authentication_switches_too() {
    let users = common::resp::users_file("resp3");
    let (_server, port) = quicksilver(&["-Y", users.to_str().expect("path")]);
    let mut client: Client = connect(port);
    // Before authentication the marker `call` sends is refused too: read each reply whole.
    client.send(&frame(&["GET", "k"]));
    assert_eq!(client.read_until(b"\r\n"), b"-NOAUTH Authentication required.\r\n");
    client.send(&frame(&["HELLO", "3", "AUTH", "app", "pw", "SETNAME", "web"]));
    let hello = client.read_until(b"$7\r\nmodules\r\n*0\r\n");
    assert!(hello.starts_with(b"%7\r\n") && hello.windows(4).any(|w| w == b":3\r\n"), "{hello:?}");
    assert_eq!(call(&mut client, &frame(&["GET", "k"])), b"_\r\n");
    assert_eq!(call(&mut client, &frame(&["CLIENT", "GETNAME"])), b"$3\r\nweb\r\n");
}

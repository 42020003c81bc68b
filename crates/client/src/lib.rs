//! qs-client: native UDP/TCP client with client-side keyhash direction, memcached text/meta client,
//! ketama consistent hashing. Built by the UDP issue; empty until then.
#![forbid(unsafe_code)]

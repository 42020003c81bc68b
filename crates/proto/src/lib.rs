//! qs-proto: memcached text/meta, memcached UDP framing and the native binary protocol as pure
//! functions over byte slices (no I/O). Built by the server issue; empty until then.
#![forbid(unsafe_code)]

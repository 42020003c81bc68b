//! Ketama consistent hashing as memcached clients share it, so a fleet of memcached and
//! quicksilver nodes can be addressed by qs-client and by libmemcached-based clients (pylibmc,
//! PHP's memcached, libmemcached's tools), twemproxy and others alike: the same key goes to the
//! same server from every one of them.
//!
//! A continuum is a sorted ring of 32-bit points, each naming a server; a key goes to the server
//! of the first point at or after its hash, wrapping to the first point. The conventions in use
//! are all here ([`Flavor`]), each checked key for key against libmemcached (through pylibmc)
//! and twemproxy by the interop tests.

use std::fmt;

/// How points are placed on the continuum and keys hashed onto it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// libmemcached's `MEMCACHED_BEHAVIOR_KETAMA` with its default hash (pylibmc's
    /// `{"ketama": True}`): 100 points per server, point `i` the one-at-a-time hash of
    /// `host-i` when the port is 11211, else of `host:port-i`; keys hashed one-at-a-time;
    /// weights ignored.
    Libmemcached,
    /// The same with libmemcached's MD5 hash (`{"ketama": True, "hash": "md5"}`): points and
    /// keys hashed to the first four bytes of their MD5 digest, little-endian.
    LibmemcachedMd5,
    /// libketama's weighted continuum (libmemcached's `MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED`,
    /// pylibmc's `{"ketama_weighted": True}`, twemproxy's `distribution: ketama` with
    /// `hash: md5`): 160 points per server scaled by its share of the total weight (rounded down
    /// to a multiple of 4), four points from each MD5 digest of the same `host-i` /
    /// `host:port-i` strings; keys hashed with MD5.
    Weighted,
}

impl Flavor {
    fn key_hash(self, key: &[u8]) -> u32 {
        match self {
            Flavor::Libmemcached => one_at_a_time(key),
            Flavor::LibmemcachedMd5 | Flavor::Weighted => md5_hash(key),
        }
    }
}

/// One server of the fleet, as the other clients are told about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Server {
    /// Host name or address, exactly as given to the other clients (it is hashed as text).
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Relative weight (used by [`Flavor::Weighted`]).
    pub weight: u32,
}

impl Server {
    /// A server of weight 1.
    pub fn new(host: &str, port: u16) -> Server {
        Server { host: host.to_string(), port, weight: 1 }
    }

    /// The text hashed for point group `index`.
    fn point_name(&self, index: u32) -> String {
        if self.port == MEMCACHED_DEFAULT_PORT {
            format!("{}-{index}", self.host)
        } else {
            format!("{}:{}-{index}", self.host, self.port)
        }
    }
}

impl fmt::Display for Server {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}:{}", self.host, self.port)
    }
}

const MEMCACHED_DEFAULT_PORT: u16 = 11211;
/// libmemcached's MEMCACHED_POINTS_PER_SERVER.
const POINTS_PER_SERVER: u32 = 100;
/// libmemcached's MEMCACHED_POINTS_PER_SERVER_KETAMA (libketama's 160).
const POINTS_PER_SERVER_WEIGHTED: u32 = 160;

/// A ketama continuum over a list of servers (indices follow the list's order).
#[derive(Clone, Debug)]
pub struct Continuum {
    /// (point, server index), sorted by point.
    points: Vec<(u32, usize)>,
    servers: usize,
    flavor: Flavor,
}

/// Bob Jenkins' one-at-a-time hash, libmemcached's default (`MEMCACHED_HASH_DEFAULT`). Bytes
/// enter as C `char`s, which are signed on x86: a byte of 0x80 or more adds its sign-extended
/// value, as libmemcached built there does.
pub fn one_at_a_time(text: &[u8]) -> u32 {
    let mut hash = 0u32;
    for &byte in text {
        hash = hash.wrapping_add(byte as i8 as i32 as u32);
        hash = hash.wrapping_add(hash << 10);
        hash ^= hash >> 6;
    }
    hash = hash.wrapping_add(hash << 3);
    hash ^= hash >> 11;
    hash.wrapping_add(hash << 15)
}

/// The first four bytes of `text`'s MD5 digest, little-endian: libmemcached's MD5 key hash.
pub fn md5_hash(text: &[u8]) -> u32 {
    let digest = md5::compute(text).0;
    u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]])
}

impl Continuum {
    /// The continuum of `servers` in `flavor`.
    pub fn new(servers: &[Server], flavor: Flavor) -> Continuum {
        let mut points = Vec::new();
        let total_weight: u64 = servers.iter().map(|server| u64::from(server.weight)).sum();
        for (index, server) in servers.iter().enumerate() {
            match flavor {
                Flavor::Libmemcached | Flavor::LibmemcachedMd5 => {
                    for group in 0..POINTS_PER_SERVER {
                        points.push((flavor.key_hash(server.point_name(group).as_bytes()), index));
                    }
                }
                Flavor::Weighted => {
                    // libmemcached computes this in single precision; so do we, to agree on
                    // the rounding at every weight.
                    let share = server.weight as f32 / total_weight.max(1) as f32;
                    let per_server = ((share * POINTS_PER_SERVER_WEIGHTED as f32 / 4.0
                        * servers.len() as f32)
                        + 0.000_000_000_1)
                        .floor() as u32
                        * 4;
                    for group in 0..per_server / 4 {
                        let digest = md5::compute(server.point_name(group).as_bytes()).0;
                        for chunk in digest.chunks_exact(4) {
                            let point = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
                            points.push((point, index));
                        }
                    }
                }
            }
        }
        points.sort_unstable();
        Continuum { points, servers: servers.len(), flavor }
    }

    /// The index of the server that holds `key`; `None` without servers.
    pub fn server_for(&self, key: &[u8]) -> Option<usize> {
        if self.servers == 1 {
            // libmemcached skips hashing with one server.
            return Some(0);
        }
        let hash = self.flavor.key_hash(key);
        let at = self.points.partition_point(|&(point, _)| point < hash);
        self.points.get(at).or_else(|| self.points.first()).map(|&(_, server)| server)
    }

    /// Points on the continuum.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// Whether there are no points (no servers).
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet(count: u16) -> Vec<Server> {
        (0..count).map(|index| Server::new("10.0.0.1", 11211 + index)).collect()
    }

    #[test]
    fn md5_hash_is_the_digest_prefix_little_endian() {
        // MD5("") = d41d8cd98f00b204e9800998ecf8427e.
        assert_eq!(md5_hash(b""), 0xd98c_1dd4);
        // MD5("a") = 0cc175b9c0f1b6a831c399e269772661.
        assert_eq!(md5_hash(b"a"), 0xb975_c10c);
    }

    #[test]
    fn one_at_a_time_matches_jenkins() {
        // Reference values of Jenkins' one-at-a-time (as libmemcached computes them).
        assert_eq!(one_at_a_time(b""), 0);
        assert_eq!(one_at_a_time(b"a"), 0xca2e_9442);
        assert_eq!(one_at_a_time(b"The quick brown fox jumps over the lazy dog"), 0x519e_91f5);
    }

    #[test]
    fn point_names_follow_libmemcached() {
        assert_eq!(Server::new("cache1", 11211).point_name(7), "cache1-7");
        assert_eq!(Server::new("10.0.0.2", 22122).point_name(0), "10.0.0.2:22122-0");
    }

    #[test]
    fn points_per_server_follow_each_flavour() {
        assert_eq!(Continuum::new(&fleet(3), Flavor::Libmemcached).len(), 300);
        assert_eq!(Continuum::new(&fleet(3), Flavor::LibmemcachedMd5).len(), 300);
        assert_eq!(Continuum::new(&fleet(3), Flavor::Weighted).len(), 480);
        let mut weighted = fleet(2);
        weighted[0].weight = 3;
        // Shares 3/4 and 1/4 of 160 x 2 points: 240 and 80.
        assert_eq!(Continuum::new(&weighted, Flavor::Weighted).len(), 320);
    }

    #[test]
    fn keys_spread_and_mostly_stay_when_a_server_joins() {
        for flavor in [Flavor::Libmemcached, Flavor::LibmemcachedMd5, Flavor::Weighted] {
            let before = Continuum::new(&fleet(4), flavor);
            let after = Continuum::new(&fleet(5), flavor);
            let mut counts = [0u32; 4];
            let mut moved = 0;
            for key in 0..20_000 {
                let key = format!("key:{key}");
                let old = before.server_for(key.as_bytes()).expect("servers");
                counts[old] += 1;
                let new = after.server_for(key.as_bytes()).expect("servers");
                if new != old {
                    assert_eq!(new, 4, "{flavor:?}: a key moved between old servers");
                    moved += 1;
                }
            }
            assert!(counts.iter().all(|&count| (3_000..7_000).contains(&count)), "{flavor:?}: {counts:?}");
            // About a fifth of the keys move to the new server, none elsewhere.
            assert!((2_000..6_500).contains(&moved), "{flavor:?}: {moved} moved");
        }
    }

    #[test]
    fn one_server_takes_every_key_and_none_takes_none() {
        let one = Continuum::new(&fleet(1), Flavor::Libmemcached);
        assert_eq!(one.server_for(b"anything"), Some(0));
        let none = Continuum::new(&[], Flavor::Libmemcached);
        assert!(none.is_empty());
        assert_eq!(none.server_for(b"anything"), None);
    }
}

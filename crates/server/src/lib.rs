//! qs-server: the runtime (workers, event loops, sockets, request direction, config, stats) and the
//! `quicksilver` binary. Built by the server issue; empty until then.

//! qs-sim: cache and partition simulators driving the real engine. Empty until its issue.
#![forbid(unsafe_code)]

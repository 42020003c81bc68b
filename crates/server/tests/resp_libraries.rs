//! The cache, lock and rate-limit libraries teams run over Redis (issue 76), each through its
//! own API against redis-server and then against quicksilver with one worker and with four
//! (keys then live on several workers): Django's RedisCache, django-redis and limits
//! (interop/python_libraries), node-redlock, rate-limit-redis under express-rate-limit and
//! @keyv/redis (interop/node_libraries), go-redsync and go-redis/redis_rate
//! (interop/go_libraries), and Laravel's Redis cache store through phpredis
//! (interop/php). Each workload checks what its library promises and exits non-zero at the
//! first difference; running it against redis-server in the same test shows the workload
//! itself is right.
//!
//! Their packages come from the registries the first time, at the versions pinned beside
//! them (requirements.txt, package-lock.json, go.sum); php-redis is Debian's (scripts/test.sh
//! installs it).

mod common;

use common::resp::{quicksilver, Redis};
use std::path::{Path, PathBuf};
use std::process::Command;

fn interop(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop").join(dir)
}

/// Runs `program args... PORT` in `dir` against redis-server, then quicksilver -t 1 and -t 4.
fn against_both(dir: &Path, program: &str, args: &[&str]) {
    let redis = Redis::start();
    let run = |port: u16, server: &str| {
        let output = Command::new(program)
            .args(args)
            .arg(port.to_string())
            .current_dir(dir)
            .output()
            .unwrap_or_else(|e| panic!("{program} (scripts/test.sh installs it): {e}"));
        assert!(
            output.status.success(),
            "{program} {args:?} against {server}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    };
    run(redis.port, "redis-server");
    for workers in ["1", "4"] {
        let (_server, port) = quicksilver(&["-t", workers]);
        run(port, &format!("quicksilver -t {workers}"));
    }
}

/// A virtual environment in the cache with requirements.txt's packages (from PyPI the first
/// time): its python.
fn python_libraries() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache"));
    let venv = cache.join("quicksilver/venv-libraries");
    let python = venv.join("bin/python");
    let requirements = interop("python_libraries/requirements.txt");
    let wanted = std::fs::read_to_string(&requirements).expect("requirements.txt");
    let stamp = venv.join("requirements.txt");
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(&wanted) {
        if !python.exists() {
            let made = Command::new("/usr/bin/python3").arg("-m").arg("venv").arg(&venv).status();
            assert!(made.expect("python3 -m venv (python3-venv)").success(), "venv");
        }
        let installed = Command::new(venv.join("bin/pip"))
            .args(["install", "-q", "-r"])
            .arg(&requirements)
            .status()
            .expect("pip");
        assert!(installed.success(), "pip install -r {}", requirements.display());
        std::fs::write(&stamp, wanted).expect("stamp");
    }
    python
}

#[test]
fn python_libraries_django_django_redis_and_limits() {
    let python = python_libraries();
    let dir = interop("python_libraries");
    against_both(&dir, python.to_str().expect("path"), &["workload.py"]);
}

#[test]
fn node_libraries_redlock_rate_limit_redis_and_keyv() {
    let dir = interop("node_libraries");
    if !dir.join("node_modules/redlock").exists() {
        // npm ci takes the versions package-lock.json pins from the npm registry.
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .status()
            .expect("npm (Node.js)");
        assert!(status.success(), "npm ci");
    }
    against_both(&dir, "node", &["workload.mjs"]);
}

#[test]
fn go_libraries_redsync_and_redis_rate() {
    let dir = interop("go_libraries");
    // Built once (go.sum pins the modules, from the Go module proxy the first time), then run
    // three times.
    let binary = std::env::temp_dir().join(format!("qs-go-libraries-{}", std::process::id()));
    let status = Command::new("go")
        .arg("build")
        .arg("-o")
        .arg(&binary)
        .arg(".")
        .current_dir(&dir)
        .status()
        .expect("go (scripts/test.sh installs it)");
    assert!(status.success(), "go build");
    against_both(&dir, binary.to_str().expect("path"), &[]);
    let _ = std::fs::remove_file(&binary);
}

#[test]
fn laravel_cache_store_through_phpredis() {
    against_both(&interop("php"), "php", &["laravel.php"]);
}

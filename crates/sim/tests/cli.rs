//! The `qs-sim` binary end to end: a Twitter-format trace on disk through `mrc`, and the
//! errors a user sees for a missing file or a malformed line.

use std::path::PathBuf;
use std::process::Command;

fn qs_sim() -> Command {
    Command::new(env!("CARGO_BIN_EXE_qs-sim"))
}

/// A test's own directory under the temporary one, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `text` to `name` in a directory of its own (what the run writes beside it goes too).
fn trace_file(name: &str, text: &str) -> (Scratch, PathBuf) {
    let dir = std::env::temp_dir().join(format!("qs-sim-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    (Scratch(dir), path)
}

#[test]
fn a_twitter_trace_gives_curves_for_every_model() {
    // 200 keys read in a loop of 2,000 gets, every key set first: an LRU cache of all the keys
    // hits every get; one of a tenth of them hits none (a loop larger than the cache).
    let mut text = String::new();
    for key in 0..200 {
        text.push_str(&format!("{key},key{key},8,40,1,set,0\n"));
    }
    for i in 0..2000 {
        text.push_str(&format!("{},key{},8,40,1,get,0\n", 200 + i, i % 200));
    }
    let (_scratch, path) = trace_file("loop.csv", &text);
    let svg = path.with_extension("svg");
    let output = qs_sim()
        .args([
            "mrc",
            "--trace",
            path.to_str().unwrap(),
            "--format",
            "twitter",
            "--fractions",
            "0.1,1",
            "--json",
        ])
        .args(["--svg", svg.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8(output.stdout).unwrap();
    let json: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(json["requests"], 2200);
    assert_eq!(json["gets"], 2000);
    assert_eq!(json["keys"], 200);
    let points = json["points"].as_array().unwrap();
    assert_eq!(points[0]["lru"], 0.0);
    assert_eq!(points[0]["fifo"], 0.0);
    assert_eq!(points[1]["lru"], 1.0);
    assert_eq!(points[1]["fifo"], 1.0);
    assert_eq!(points[1]["engine"], 1.0);
    let drawing = std::fs::read_to_string(&svg).unwrap();
    assert!(drawing.starts_with("<svg") && drawing.contains("exact LRU") && drawing.contains("engine"));
}

#[test]
fn bad_input_is_named() {
    let (_scratch, path) = trace_file("bad.csv", "1,a,8,40,1,get,0\n2,b,8,forty,1,get,0\n");
    let output = qs_sim().args(["mrc", "--trace", path.to_str().unwrap()]).output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("trace line 2") && stderr.contains("value size"), "{stderr}");

    let output = qs_sim().args(["mrc", "--trace", "/nonexistent/trace.csv"]).output().unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8(output.stderr).unwrap().contains("/nonexistent/trace.csv"));
}

#[test]
fn skew_and_front_run() {
    let output = qs_sim().args(["skew", "--keys", "10000", "--partitions", "4,16"]).output().unwrap();
    assert!(output.status.success());
    assert_eq!(String::from_utf8(output.stdout).unwrap().lines().count(), 4);
    let output = qs_sim()
        .args(["front", "--records", "1000", "--requests", "10000", "--ycsb", "b", "--ways", "4", "--json"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout).unwrap();
    let json: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    // Six sizes times two policies; larger front caches miss less.
    let points = json.as_array().unwrap();
    assert_eq!(points.len(), 12);
    let lru: Vec<f64> =
        points.iter().filter(|p| p["policy"] == "Lru").map(|p| p["miss_ratio"].as_f64().unwrap()).collect();
    assert!(lru.windows(2).all(|w| w[1] <= w[0]), "{lru:?}");
}

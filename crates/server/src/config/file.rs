//! `--config-file FILE`: options read from a file in the format of Debian's /etc/memcached.conf
//! (one option per line, `#` comments), under the command line's.
//!
//! The file is read as Debian's systemd wrapper for memcached reads it, so an existing
//! /etc/memcached.conf starts quicksilver unchanged: `-d` and `-h` lines are skipped (a service
//! manager runs the server in the foreground; `-d` on the command line still detaches), and a
//! `logfile` line is skipped too (the output goes to stderr, which systemd's journal keeps).
//!
//! Options on the command line win: one the command line gives replaces the file's, `-l` and
//! `-v` included; `-o` lists are joined, file first, so a sub-option the command line names
//! is the one that holds.

use super::Config;
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser};
use std::ffi::OsString;
use std::path::Path;

/// Why no configuration came out of the arguments and the file.
#[derive(Debug)]
pub enum LoadError {
    /// The command line (or the file's options) did not parse; clap's report, which exits
    /// with its own status (help and version among them).
    Args(clap::Error),
    /// The file could not be read, or a line in it is not an option.
    File(String),
}

/// Directives of memcached.conf that are not options, each skipped (see the module's text).
const SKIPPED_DIRECTIVES: &[&str] = &["logfile"];

/// The configuration from `args` (the program's name first), with `--config-file`'s options
/// under them when it names a file.
pub fn load(args: &[OsString]) -> Result<Config, LoadError> {
    let line_matches = Config::command().try_get_matches_from(args).map_err(LoadError::Args)?;
    let line = Config::from_arg_matches(&line_matches).map_err(LoadError::Args)?;
    let Some(path) = line.config_file.clone() else {
        return Ok(line);
    };
    let text = std::fs::read_to_string(&path).map_err(|error| {
        LoadError::File(format!("cannot read the config file {}: {error}", path.display()))
    })?;
    let options = options_in(&text, &path)?;
    let program = args.first().cloned().unwrap_or_else(|| OsString::from("quicksilver"));
    // The file on its own first, so that a bad option names the file it came from.
    let file_args: Vec<OsString> =
        std::iter::once(program).chain(options.into_iter().map(OsString::from)).collect();
    Config::try_parse_from(&file_args).map_err(|error| {
        LoadError::File(format!(
            "in the config file {}: {}",
            path.display(),
            error.render().to_string().trim_end()
        ))
    })?;
    // Later options override earlier ones (args_override_self), so the command line's win.
    let merged_args: Vec<OsString> = file_args.iter().chain(args.iter().skip(1)).cloned().collect();
    let mut merged = Config::try_parse_from(&merged_args).map_err(LoadError::Args)?;
    // Lists accumulate instead: the command line's replace the file's.
    let from_line = |id: &str| line_matches.value_source(id) == Some(ValueSource::CommandLine);
    if from_line("listen") {
        merged.listen = line.listen;
    }
    if from_line("verbose") {
        merged.verbose = line.verbose;
    }
    Ok(merged)
}

/// The options in a memcached.conf text, each word an argument.
pub fn options_in(text: &str, path: &Path) -> Result<Vec<String>, LoadError> {
    let mut options = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = strip_comment(raw);
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or_default();
        if !first.starts_with('-') {
            if SKIPPED_DIRECTIVES.contains(&first) {
                continue;
            }
            return Err(LoadError::File(format!(
                "{}:{}: {first:?} is neither an option (-x or --name) nor a directive quicksilver knows (logfile)",
                path.display(),
                index + 1
            )));
        }
        if is_skipped_option(first) {
            continue;
        }
        if first.starts_with("--config-file") {
            return Err(LoadError::File(format!(
                "{}:{}: a config file cannot name another one",
                path.display(),
                index + 1
            )));
        }
        options.push(first.to_string());
        options.extend(words.map(str::to_string));
    }
    Ok(options)
}

/// `-d` and `-h` lines (and their long names), which Debian's wrapper drops.
fn is_skipped_option(word: &str) -> bool {
    word.starts_with("-d") || word.starts_with("-h") || word == "--daemon" || word == "--help"
}

/// The line up to its first `#` that no backslash escapes, with `\#` read as `#`.
fn strip_comment(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'#') => {
                out.push('#');
                chars.next();
            }
            '#' => break,
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        std::iter::once("quicksilver").chain(list.iter().copied()).map(OsString::from).collect()
    }

    fn write(name: &str, text: &str) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("qs-config-{}-{name}.conf", std::process::id()));
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn comments_escapes_and_blank_lines() {
        assert_eq!(strip_comment("-m 64 # the memory"), "-m 64 ");
        assert_eq!(strip_comment("-D \\# # a delimiter"), "-D # ");
        assert_eq!(strip_comment("# all comment"), "");
        let text = "# a comment\n\n   -m 128\n-l 127.0.0.1  # local\n-d\nlogfile /var/log/x.log\n-vv\n";
        let got = options_in(text, Path::new("x.conf")).map_err(|_| ()).unwrap();
        assert_eq!(got, ["-m", "128", "-l", "127.0.0.1", "-vv"]);
    }

    #[test]
    fn unknown_directives_and_nested_files_are_refused_with_their_line() {
        let error = |text: &str| match options_in(text, Path::new("q.conf")) {
            Err(LoadError::File(message)) => message,
            other => panic!("{other:?}"),
        };
        assert!(error("-m 64\nmemory 64\n").starts_with("q.conf:2: \"memory\""));
        assert!(error("--config-file other.conf\n").starts_with("q.conf:1: a config file cannot"));
    }

    #[test]
    fn the_command_line_wins_over_the_file() {
        let path = write("wins", "-m 128\n-p 11211\n-l 127.0.0.1\n-l 127.0.0.2\n-v\n-o idle_timeout=5\n-M\n");
        let file = path.to_str().unwrap();
        let config = load(&args(&["--config-file", file, "-p", "5000", "-l", "127.0.0.3"])).unwrap();
        assert_eq!((config.memory_mib, config.port), (128, Some(5000)));
        assert_eq!(config.listen, ["127.0.0.3"]);
        assert_eq!(config.verbose, 1);
        assert!(config.no_evictions);
        let config = load(&args(&["--config-file", file, "-vv", "-o", "idle_timeout=9"])).unwrap();
        assert_eq!(config.listen, ["127.0.0.1", "127.0.0.2"]);
        assert_eq!(config.verbose, 2);
        assert_eq!(config.extended, ["idle_timeout=5", "idle_timeout=9"]);
        assert_eq!(config.extended().unwrap().idle_timeout_secs, 9);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_bad_option_in_the_file_names_the_file() {
        let path = write("bad", "-m lots\n");
        match load(&args(&["--config-file", path.to_str().unwrap()])) {
            Err(LoadError::File(message)) => assert!(message.contains("in the config file"), "{message}"),
            other => panic!("{other:?}"),
        }
        std::fs::remove_file(path).unwrap();
        match load(&args(&["--config-file", "/nonexistent/qs.conf"])) {
            Err(LoadError::File(message)) => {
                assert!(message.starts_with("cannot read the config file"), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }
}

//! `Spec::parse` on arbitrary text: it must return a spec or a `SpecError`
//! that names the spec file, never panic, overflow the stack or run away
//! (libFuzzer's timeout and memory limit catch the last two). An accepted
//! spec must also have a canonical form.
//!
//! The spec module is compiled in from its source files (see Cargo.toml);
//! `Spec::parse` reads no file, so nothing here touches the disk.
#![no_main]

#[allow(dead_code)]
#[path = "../../src/pathkind.rs"]
mod pathkind;
#[allow(dead_code, unused_imports)]
#[path = "../../src/spec/mod.rs"]
mod spec;

/// The compiler's object-store listing, which the spec module calls for
/// sources given as URLs; `Spec::parse` resolves no files, so it never runs.
#[allow(dead_code)]
mod remote_input {
    pub fn is_url(s: &str) -> bool {
        tessera_reader::is_store_url(s)
    }
    pub fn resolve(url: &str, _: &[(String, String)]) -> Result<(Vec<String>, bool), String> {
        Err(format!("{url}: no object stores in the fuzz target"))
    }
}

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match spec::Spec::parse(text, Path::new("fuzz.yaml")) {
        Ok(s) => {
            let canonical = s.canonical_json();
            assert!(canonical.is_object(), "{canonical}");
        }
        Err(e) => {
            let shown = e.to_string();
            assert!(shown.starts_with("fuzz.yaml"), "{shown}");
            assert_eq!(e.file(), Path::new("fuzz.yaml"));
        }
    }
});

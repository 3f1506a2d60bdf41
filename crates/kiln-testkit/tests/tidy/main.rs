//! Repository rules that code review alone wouldn't keep: the crate dependency graph of
//! ARCHITECTURE.md, file-size limits, no import loops across more than three files,
//! crate docs, and no stubs.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

mod imports;

/// No `.rs` file (source, inline tests, test suites) may exceed this many lines.
const MAX_LINES: usize = 600;
/// Most files that may import each other in a loop (a loop is one unit, split or not).
const MAX_LOOP_FILES: usize = 3;
/// Crates any test may use: the test kit, and the catalogue (a leaf) to look files up.
const DEV_ONLY_OK: &[&str] = &["kiln-testkit", "kiln-catalog"];
/// Files allowed past the limit, with the reason.
const SIZE_ALLOWLIST: &[(&str, &str)] = &[];
/// Import loops over the limit that are known and being removed, as (crate, the loop's
/// modules sorted), with the reason. A listed loop must still exist: fixed, it comes off.
const LOOP_ALLOWLIST: &[(&str, &[&str], &str)] = &[(
    "kiln-kernels",
    &[
        "dispatch",
        "dispatch::op_kernels",
        "error",
        "ops::exp",
        "ops::f16_vector",
        "ops::f16_vector::x86",
        "ops::softmax",
        "packed",
        "packed::layout",
    ],
    // Issue 31: found once tidy saw bare child paths. The kernel table is wired to
    // every kernel, and the public kernels dispatch back through `KernelTable::best()`
    // (ARCHITECTURE's "one dispatch path"); `error` names an `Isa` and `dispatch`
    // returns its errors. Cutting it means a table crate below the kernels.
    "the kernel table and the kernels it dispatches to (issue 31)",
)];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn crate_dirs() -> Vec<PathBuf> {
    let mut v: Vec<_> = fs::read_dir(root().join("crates"))
        .expect("crates/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("Cargo.toml").exists())
        .collect();
    v.sort();
    v
}

fn crate_name(dir: &Path) -> String {
    dir.file_name()
        .expect("dir name")
        .to_string_lossy()
        .into_owned()
}

/// `kiln-*` crates named in a Cargo.toml table (e.g. `[dependencies]`).
fn kiln_deps(manifest: &str, table: &str) -> BTreeSet<String> {
    let mut in_table = false;
    let mut deps = BTreeSet::new();
    for line in manifest.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_table = t == format!("[{table}]");
            continue;
        }
        if in_table {
            if let Some((name, _)) = t.split_once('=') {
                let name = name.trim();
                if name.starts_with("kiln") {
                    deps.insert(name.to_string());
                }
            }
        }
    }
    deps
}

/// The allowed edges, parsed from ARCHITECTURE.md's `tidy:deps` table.
fn allowed_edges() -> BTreeMap<String, BTreeSet<String>> {
    let doc = fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let start = doc.find("<!-- tidy:deps -->").expect("tidy:deps marker");
    let end = doc.find("<!-- /tidy:deps -->").expect("end marker");
    let mut map = BTreeMap::new();
    for line in doc[start..end].lines().skip(3) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 3 {
            continue;
        }
        let deps = cells[2]
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        map.insert(cells[1].to_string(), deps);
    }
    map
}

#[test]
fn dependency_graph_follows_architecture_md() {
    let allowed = allowed_edges();
    let mut errors = vec![];
    for dir in crate_dirs() {
        let name = crate_name(&dir);
        let manifest = fs::read_to_string(dir.join("Cargo.toml")).expect("manifest");
        let Some(ok) = allowed.get(&name) else {
            errors.push(format!(
                "{name} is not in ARCHITECTURE.md's dependency table"
            ));
            continue;
        };
        for dep in kiln_deps(&manifest, "dependencies") {
            if !ok.contains(&dep) {
                errors.push(format!(
                    "{name} depends on {dep}, which ARCHITECTURE.md forbids"
                ));
            }
        }
        for dep in kiln_deps(&manifest, "dev-dependencies") {
            if !DEV_ONLY_OK.contains(&dep.as_str()) && !ok.contains(&dep) && dep != name {
                errors.push(format!(
                    "{name} dev-depends on {dep}, which ARCHITECTURE.md forbids"
                ));
            }
        }
    }
    for name in allowed.keys() {
        if !root().join("crates").join(name).join("Cargo.toml").exists() {
            errors.push(format!("ARCHITECTURE.md lists {name}, which doesn't exist"));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn every_crate_is_in_the_code_map() {
    let doc = fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    for dir in crate_dirs() {
        let name = crate_name(&dir);
        assert!(
            doc.contains(&format!("### `{name}`")),
            "{name} has no code-map section"
        );
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            let n = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if n != "target" && n != "fixtures" {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn rust_files_stay_small() {
    let mut files = vec![];
    for dir in crate_dirs() {
        rust_files(&dir, &mut files);
    }
    let mut errors = vec![];
    for f in files {
        let rel = f
            .strip_prefix(root())
            .unwrap_or(&f)
            .to_string_lossy()
            .replace('\\', "/");
        let rel = rel.trim_start_matches("./").to_string();
        if SIZE_ALLOWLIST.iter().any(|(p, _)| rel.ends_with(p)) {
            continue;
        }
        let text = fs::read_to_string(&f).expect("readable");
        let n = text.lines().count();
        if n > MAX_LINES {
            errors.push(format!("{rel}: {n} lines (limit {MAX_LINES})"));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn no_import_loop_spans_more_than_three_files() {
    let mut errors = vec![];
    let mut found: Vec<(String, Vec<String>)> = vec![];
    for dir in crate_dirs() {
        let src = dir.join("src");
        let mut files = vec![];
        rust_files(&src, &mut files);
        let graph = imports::crate_graph(&src, &files);
        let name = crate_name(&dir);
        for comp in imports::loops(&graph) {
            let allowed = LOOP_ALLOWLIST
                .iter()
                .any(|(c, m, _)| *c == name && comp.iter().eq(m.iter()));
            if comp.len() > MAX_LOOP_FILES && !allowed {
                errors.push(format!("{name}: {}", comp.join(" → ")));
            }
            found.push((name.clone(), comp));
        }
    }
    for (c, m, _) in LOOP_ALLOWLIST {
        if !found
            .iter()
            .any(|(fc, fm)| fc == c && fm.iter().eq(m.iter()))
        {
            errors.push(format!(
                "{c}: {} is allowed as a loop but is no longer one; take it off LOOP_ALLOWLIST",
                m.join(" → ")
            ));
        }
    }
    assert!(
        errors.is_empty(),
        "files importing each other in a loop (at most {MAX_LOOP_FILES}):\n{}",
        errors.join("\n")
    );
}

#[test]
fn every_crate_has_a_crate_doc() {
    for dir in crate_dirs() {
        let lib = dir.join("src/lib.rs");
        let main = dir.join("src/main.rs");
        let path = if lib.exists() { lib } else { main };
        let text = fs::read_to_string(&path).expect("crate root");
        assert!(
            text.trim_start().starts_with("//!"),
            "{} has no //! crate doc",
            path.display()
        );
    }
}

#[test]
fn no_stubs_in_library_code() {
    let mut files = vec![];
    for dir in crate_dirs() {
        rust_files(&dir.join("src"), &mut files);
    }
    let stub = ["todo", "!("].concat();
    let unimpl = ["unimplemented", "!("].concat();
    for f in files {
        let text = fs::read_to_string(&f).expect("readable");
        let code = &text[..text.find("#[cfg(test)]").unwrap_or(text.len())];
        assert!(
            !code.contains(&stub) && !code.contains(&unimpl),
            "{} contains a stub",
            f.display()
        );
    }
}

//! Repository rules that code review alone wouldn't keep: the crate dependency graph of
//! ARCHITECTURE.md, file-size limits, no import loops across more than three files,
//! crate docs, and no stubs.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Non-test source files may not exceed this many lines.
const MAX_LINES: usize = 600;
/// Most files that may import each other in a loop (a loop is one unit, split or not).
const MAX_LOOP_FILES: usize = 3;
/// Crates any test may use: the test kit, and the catalogue (a leaf) to look files up.
const DEV_ONLY_OK: &[&str] = &["kiln-testkit", "kiln-catalog"];
/// Files allowed past the limit, with the reason.
const SIZE_ALLOWLIST: &[(&str, &str)] = &[];

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

/// Lines before the first `#[cfg(test)]` (inline test modules don't count).
fn non_test_lines(text: &str) -> usize {
    text.lines()
        .take_while(|l| l.trim() != "#[cfg(test)]")
        .count()
}

#[test]
fn source_files_stay_small() {
    let mut files = vec![];
    for dir in crate_dirs() {
        rust_files(&dir.join("src"), &mut files);
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
        let n = non_test_lines(&text);
        if n > MAX_LINES {
            errors.push(format!("{rel}: {n} lines (limit {MAX_LINES})"));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

/// A source file's module path within its crate (`a::b` for `src/a/b.rs` or
/// `src/a/b/mod.rs`; empty for the crate root).
fn module_path(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let parts = match parts.last().map(String::as_str) {
        Some("mod" | "lib" | "main") => &parts[..parts.len() - 1],
        _ => &parts[..],
    };
    parts.join("::")
}

/// The modules of `modules` that `text` (module `me`) names through `crate::` paths or
/// `super::` paths: for each path, the longest prefix that is a module file (the crate
/// root or the parent module when the path names one of their own items).
fn imported_modules(me: &str, text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let parent = me.rsplit_once("::").map_or("", |(p, _)| p);
    let mut out = BTreeSet::new();
    for (prefix, base) in [("crate::", ""), ("super::", parent)] {
        for (i, _) in text.match_indices(prefix) {
            let path: String = text[i + prefix.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let mut parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
            // Down to no parts at all: an item of the base module itself.
            loop {
                let joined = parts.join("::");
                let cand = match (base.is_empty(), joined.is_empty()) {
                    (true, _) => joined,
                    (false, true) => base.to_string(),
                    (false, false) => format!("{base}::{joined}"),
                };
                if modules.contains(&cand) {
                    if cand != me {
                        out.insert(cand);
                    }
                    break;
                }
                if parts.pop().is_none() {
                    break;
                }
            }
        }
    }
    out
}

/// Strongly connected components of `graph` with more than one module (Tarjan).
fn loops(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        found: Vec<Vec<String>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, v: &'g str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            for w in self.graph.get(v).into_iter().flatten() {
                if !self.index.contains_key(w.as_str()) {
                    self.visit(w);
                    let lw = self.low[w.as_str()];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.stack.contains(&w.as_str()) {
                    let iw = self.index[w.as_str()];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = vec![];
                while let Some(w) = self.stack.pop() {
                    comp.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.found.push(comp);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: vec![],
        found: vec![],
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

#[test]
fn no_import_loop_spans_more_than_three_files() {
    let mut errors = vec![];
    for dir in crate_dirs() {
        let src = dir.join("src");
        let mut files = vec![];
        rust_files(&src, &mut files);
        let texts: BTreeMap<String, String> = files
            .iter()
            .map(|f| {
                let text = fs::read_to_string(f).expect("readable");
                let code: String = text
                    .lines()
                    .take_while(|l| l.trim() != "#[cfg(test)]")
                    .filter(|l| !l.trim_start().starts_with("//"))
                    .collect::<Vec<_>>()
                    .join("\n");
                (module_path(&src, f), code)
            })
            .collect();
        let modules: BTreeSet<String> = texts.keys().cloned().collect();
        let graph: BTreeMap<String, BTreeSet<String>> = texts
            .iter()
            .map(|(m, t)| (m.clone(), imported_modules(m, t, &modules)))
            .collect();
        for comp in loops(&graph) {
            if comp.len() > MAX_LOOP_FILES {
                errors.push(format!("{}: {}", crate_name(&dir), comp.join(" → ")));
            }
        }
    }
    assert!(
        errors.is_empty(),
        "files importing each other in a loop (at most {MAX_LOOP_FILES}):\n{}",
        errors.join("\n")
    );
}

#[test]
fn import_loops_are_found() {
    let modules: BTreeSet<String> = ["a", "b", "c", "d", "d::e"]
        .into_iter()
        .map(String::from)
        .collect();
    let text = |t: &str, me: &str| imported_modules(me, t, &modules);
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", text("use crate::b::Thing;", "a")),
        ("b", text("crate::c::f();", "b")),
        ("c", text("use crate::d::e::{X, Y};", "c")),
        ("d", BTreeSet::new()),
        ("d::e", text("use crate::a;\nuse super::Z;", "d::e")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(graph["c"], BTreeSet::from(["d::e".to_string()]));
    assert_eq!(
        graph["d::e"],
        BTreeSet::from(["a".to_string(), "d".to_string()])
    );
    assert_eq!(
        loops(&graph),
        vec![vec!["a", "b", "c", "d::e"]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>()]
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

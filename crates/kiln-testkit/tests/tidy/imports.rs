//! Import loops: which module files a file names, and the loops they make.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Each module file of a crate (`files`, under `src`) and the module files it names.
/// Inline test modules and comment lines are left out.
pub(crate) fn crate_graph(src: &Path, files: &[PathBuf]) -> BTreeMap<String, BTreeSet<String>> {
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
            (module_path(src, f), code)
        })
        .collect();
    let modules: BTreeSet<String> = texts.keys().cloned().collect();
    let mut reexports = Reexports::new();
    for (m, t) in &texts {
        reexports_of(m, t, &modules, &mut reexports);
    }
    texts
        .iter()
        .map(|(m, t)| (m.clone(), imported_modules_via(m, t, &modules, &reexports)))
        .collect()
}

/// `t` past a leading visibility (`pub`, `pub(crate)`, `pub(in …)`), or `None` when
/// it has none.
fn after_visibility(t: &str) -> Option<&str> {
    let r = t.strip_prefix("pub")?;
    let r = r.trim_start();
    let r = r
        .strip_prefix('(')
        .and_then(|r| r.split_once(')'))
        .map_or(r, |(_, r)| r);
    Some(r.trim_start())
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

/// The modules of `modules` that `text` (module `me`) names: through `crate::`,
/// `super::` and `self::` paths, and through its child modules named bare (`child::f`
/// after `mod child;`). For each path, the longest prefix that is a module file (the
/// crate root or the parent module when the path names one of their own items).
/// Re-exports (`pub use child::X`) are not uses: a crate root re-exporting its modules
/// would otherwise loop with every module that uses a re-exported item.
fn imported_modules(me: &str, text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    imported_modules_via(me, text, modules, &Reexports::new())
}

/// Items a module re-exports from another: (module, item name) → the module it comes from.
type Reexports = BTreeMap<(String, String), String>;

/// [`imported_modules`], with a path to an item that its module re-exports (`crate::X`
/// after `pub use config::X;` in `lib.rs`) counted as a use of the module it comes from.
fn imported_modules_via(
    me: &str,
    text: &str,
    modules: &BTreeSet<String>,
    reexports: &Reexports,
) -> BTreeSet<String> {
    let parent = me.rsplit_once("::").map_or("", |(p, _)| p);
    let mut out = BTreeSet::new();
    let mut bases: Vec<(String, String)> = vec![
        ("crate::".into(), String::new()),
        ("super::".into(), parent.to_string()),
        ("self::".into(), me.to_string()),
    ];
    for child in declared_children(text) {
        bases.push((format!("{child}::"), child_of(me, &child)));
    }
    let text = without_reexports(text);
    let inline = inline_modules(&text);
    for (prefix, base) in &bases {
        for (i, _) in text.match_indices(prefix.as_str()) {
            // In an inline `mod x { … }`, `super::` and `self::` stay in this file.
            let nested = inline.iter().any(|r| r.contains(&i));
            if nested && (prefix == "super::" || prefix == "self::") {
                continue;
            }
            // `x::crate::`, `kiln_foo::child::`: part of a longer path, not this prefix.
            let before = text[..i].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let rest = &text[i + prefix.len()..];
            let path: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            // `crate::{A, b::C}`: each entry of the group is a path of its own.
            let mut paths = vec![path.clone()];
            if let Some(group) = rest[path.len()..].strip_prefix('{') {
                let group = group.split('}').next().unwrap_or("");
                paths = group
                    .split(',')
                    .map(|e| {
                        let e: String = e
                            .trim()
                            .chars()
                            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                            .collect();
                        format!("{path}{e}")
                    })
                    .collect();
            }
            for path in paths {
                if let Some(m) = resolve(base, &path, modules, reexports) {
                    if m != me {
                        out.insert(m);
                    }
                }
            }
        }
    }
    out
}

/// The module file `path` (under module `base`) lands in: its longest prefix that is a
/// module, or the module an item re-exported there comes from.
fn resolve(
    base: &str,
    path: &str,
    modules: &BTreeSet<String>,
    reexports: &Reexports,
) -> Option<String> {
    let all: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
    // Down to no parts at all: an item of the base module itself.
    for n in (0..=all.len()).rev() {
        let joined = all[..n].join("::");
        let cand = match (base.is_empty(), joined.is_empty()) {
            (true, _) => joined,
            (false, true) => base.to_string(),
            (false, false) => format!("{base}::{joined}"),
        };
        if modules.contains(&cand) {
            let via = all
                .get(n)
                .and_then(|item| reexports.get(&(cand.clone(), (*item).to_string())));
            return Some(via.cloned().unwrap_or(cand));
        }
    }
    None
}

/// What module `me` re-exports: each name of a `pub use child::…` / `pub use self::…`
/// / `pub use crate::…` / `pub use super::…` item, with the module its path leads to.
fn reexports_of(me: &str, text: &str, modules: &BTreeSet<String>, out: &mut Reexports) {
    let mut item = String::new();
    let mut collecting = false;
    for line in text.lines() {
        let t = line.trim_start();
        if !collecting {
            collecting = after_visibility(t).is_some_and(|a| a.starts_with("use "));
            item.clear();
        }
        if collecting {
            item.push_str(t);
            if t.contains(';') {
                collecting = false;
                let body = item.split_once("use ").map_or("", |(_, b)| b);
                let body = body.trim_end_matches(';').trim();
                // `a::b::{X, Y as Z}` or `a::b::X`.
                let (path, names) = match body.split_once("::{") {
                    Some((p, n)) => (p.to_string(), n.trim_end_matches('}').to_string()),
                    None => match body.rsplit_once("::") {
                        Some((p, n)) => (p.to_string(), n.to_string()),
                        None => continue,
                    },
                };
                // A bare path here names a child of `me`.
                let anchored = ["crate::", "super::", "self::"]
                    .iter()
                    .any(|a| path.starts_with(a));
                let probe = if anchored {
                    format!("{path}::__item")
                } else {
                    format!("self::{path}::__item")
                };
                let Some(from) = imported_modules(me, &probe, modules).into_iter().next() else {
                    continue;
                };
                for name in names.split(',') {
                    let name = name.trim();
                    let name = name.rsplit_once(" as ").map_or(name, |(_, a)| a).trim();
                    if !name.is_empty() && name != "self" && name != "*" {
                        out.insert((me.to_string(), name.to_string()), from.clone());
                    }
                }
            }
        }
    }
}

/// The byte ranges of inline module bodies (`mod x { … }`) in `text`.
fn inline_modules(text: &str) -> Vec<std::ops::Range<usize>> {
    let mut out = vec![];
    for (i, _) in text.match_indices("mod ") {
        if text[..i]
            .chars()
            .next_back()
            .is_some_and(|c| !c.is_whitespace())
        {
            continue;
        }
        let rest = &text[i + 4..];
        let name_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let after = rest[name_len..].trim_start();
        if name_len == 0 || !after.starts_with('{') {
            continue;
        }
        let open = text.len() - after.len();
        let mut depth = 0usize;
        for (j, c) in text[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        out.push(open..open + j);
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// The module path of `me`'s child `name`.
fn child_of(me: &str, name: &str) -> String {
    if me.is_empty() {
        name.to_string()
    } else {
        format!("{me}::{name}")
    }
}

/// The child modules `text` declares from files (`mod x;`, `pub(crate) mod x;`).
fn declared_children(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let rest = after_visibility(l).unwrap_or(l);
            let name = rest.strip_prefix("mod ")?.strip_suffix(';')?.trim();
            let ident =
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            ident.then(|| name.to_string())
        })
        .collect()
}

/// `text` without its `pub use` / `pub(…) use` items (to their closing `;`).
fn without_reexports(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut skipping = false;
    for line in text.lines() {
        let t = line.trim_start();
        if !skipping {
            skipping = after_visibility(t).is_some_and(|a| a.starts_with("use "));
        }
        if skipping {
            skipping = !line.contains(';');
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Strongly connected components of `graph` with more than one module (Tarjan).
pub(crate) fn loops(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
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

/// The loop the first walk missed: `state → gate → gate::classifier → state`, where the
/// gate names its child bare (`classifier::X` after `mod classifier;`, or `self::`).
#[test]
fn bare_child_paths_are_imports() {
    let modules: BTreeSet<String> = ["", "state", "gate", "gate::classifier", "gate::cache"]
        .into_iter()
        .map(String::from)
        .collect();
    let gate = "pub mod cache;\npub(crate) mod classifier;\n\
                pub use cache::Cached;\n\
                fn f() { classifier::Injection::new(); }";
    assert_eq!(
        imported_modules("gate", gate, &modules),
        BTreeSet::from(["gate::classifier".to_string()]),
        "a bare child path is an import; a re-export is not"
    );
    assert_eq!(
        imported_modules(
            "gate",
            "mod classifier;\nuse self::classifier::X;",
            &modules
        ),
        BTreeSet::from(["gate::classifier".to_string()])
    );
    // Another crate's module of the same name is not the child.
    assert!(imported_modules("gate", "mod cache;\nuse kiln_guard::cache::X;", &modules).is_empty());
    // The crate root's children, named bare from `lib.rs`.
    assert_eq!(
        imported_modules(
            "",
            "mod state;\nfn f() { state::AppState::new(); }",
            &modules
        ),
        BTreeSet::from(["state".to_string()])
    );
    let graph: BTreeMap<String, BTreeSet<String>> = [
        (
            "state",
            imported_modules("state", "use crate::gate::Gates;", &modules),
        ),
        ("gate", imported_modules("gate", gate, &modules)),
        (
            "gate::classifier",
            imported_modules("gate::classifier", "use crate::state::AppState;", &modules),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(
        loops(&graph),
        vec![vec!["gate", "gate::classifier", "state"]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>()]
    );
}

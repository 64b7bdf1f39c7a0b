//! The import graph of Hearth's crates, read from their sources: which file takes names from
//! which (`use crate::...`, `super::...`, a child module's `name::...`), and the loops in it
//! (files that import each other, however far round). A loop is a tangle a newcomer cannot
//! read from the bottom up: the test below fails on one, naming the imports that tie it.
//!
//! The reading is deliberately plain: comments, strings and `#[cfg(test)]` modules are left
//! out (tests may reach anywhere), a path is resolved to the deepest module file it names, and
//! a module's own `mod` declarations are not imports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The source folders of the crates whose graphs are checked, from the repository's root.
pub const CRATES: [&str; 6] =
    ["shared/src", "shared/acme/src", "control/src", "edge/src", "edge/worker/src", "node/src"];

/// A crate's source: its files by module path (`["store", "users"]` for `store/users.rs`).
struct Crate {
    files: BTreeMap<Vec<String>, PathBuf>,
}

/// Rust source without comments and string or character literals (their text replaced by
/// nothing), so that only code is read.
fn code_only(source: &str) -> String {
    let bytes = source.as_bytes();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &source[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            i += rest.find("*/").map_or(rest.len(), |end| end + 2);
        } else if let Some(hashes) = raw_string_start(rest) {
            let close = format!("\"{}", "#".repeat(hashes));
            let body = 2 + hashes;
            i += body + rest[body..].find(&close).map_or(rest.len() - body, |end| end + close.len());
            out.push_str("\"\"");
        } else if bytes[i] == b'"' {
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if bytes[i] == b'\'' && char_literal_len(rest).is_some() {
            i += char_literal_len(rest).unwrap_or(1);
            out.push_str("' '");
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The number of `#` of a raw string starting `rest` (`r"`, `r#"`, `br"`...).
fn raw_string_start(rest: &str) -> Option<usize> {
    let after = rest.strip_prefix("br").or_else(|| rest.strip_prefix('r'))?;
    let hashes = after.bytes().take_while(|&b| b == b'#').count();
    (after.as_bytes().get(hashes) == Some(&b'"')).then_some(hashes + usize::from(rest.starts_with("br")))
}

/// The length of a character literal starting `rest` (`'a'`, `'\n'`, `'\u{1F600}'`), or
/// `None` for a lifetime.
fn char_literal_len(rest: &str) -> Option<usize> {
    let mut chars = rest.char_indices().skip(1);
    let (_, first) = chars.next()?;
    if first == '\\' {
        let end = rest[2..].find('\'')?;
        return Some(end + 3);
    }
    let (at, next) = chars.next()?;
    (next == '\'').then_some(at + 1)
}

/// `code` with each `pub(in path)` as `pub`: a visibility names a module, it imports nothing.
fn without_visibility_paths(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("pub(in ") {
        out.push_str(&rest[..at]);
        out.push_str("pub");
        rest = rest[at..].find(')').map_or("", |end| &rest[at + end + 1..]);
    }
    out.push_str(rest);
    out
}

/// `source` without its `#[cfg(test)]` modules (inline, or declared `mod tests;`).
fn without_tests(source: &str) -> String {
    let mut out = String::new();
    let mut rest = source;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = rest[at + "#[cfg(test)]".len()..].trim_start();
        let after = ["pub(crate) ", "pub(super) ", "pub "].iter().find_map(|v| after.strip_prefix(v)).unwrap_or(after);
        let Some(module) = after.strip_prefix("mod ") else {
            out.push_str("#[cfg(test)]");
            rest = &rest[at + "#[cfg(test)]".len()..];
            continue;
        };
        let end_of_name = module.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ' ')).unwrap_or(0);
        let body = &module[end_of_name..];
        if let Some(after) = body.strip_prefix(';') {
            rest = after;
            continue;
        }
        let mut depth = 0usize;
        let mut end = body.len();
        for (i, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &body[end..];
    }
    out.push_str(rest);
    out
}

/// Every path a `use` tree names, flattened (`a::{b, c::{self, d}}` is `a::b`, `a::c`,
/// `a::c::d`), each as its segments.
fn use_paths(tree: &str) -> Vec<Vec<String>> {
    fn walk(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
        let tree = tree.trim();
        if let Some(open) = tree.find('{') {
            let head: Vec<String> = segments(&tree[..open]);
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            let base: Vec<String> = prefix.iter().cloned().chain(head).collect();
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        walk(&base, &inner[start..i], out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            walk(&base, &inner[start..], out);
        } else {
            let tail = segments(tree.split(" as ").next().unwrap_or_default());
            let path: Vec<String> =
                prefix.iter().cloned().chain(tail.into_iter().filter(|s| s != "self" && s != "*")).collect();
            if !path.is_empty() {
                out.push(path);
            }
        }
    }
    fn segments(text: &str) -> Vec<String> {
        text.split("::").map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
    }
    let mut out = Vec::new();
    walk(&[], tree, &mut out);
    out
}

/// The paths of `code` (a file's, cleaned) that may name a module of its crate: `use` trees,
/// and paths in the code that start at `crate`, `super`, `self` or one of `children` (the
/// modules the file declares).
fn paths_in(code: &str, children: &BTreeSet<String>) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let words: Vec<(usize, &str)> = word_spans(code);
    // Where the `use` statement read last ends: its words are not read again as paths.
    let mut used_to = 0;
    for &(at, word) in &words {
        if at < used_to {
            continue;
        }
        if word == "use" && !code[..at].trim_end().ends_with("::") {
            if let Some(end) = code[at..].find(';') {
                paths.extend(use_paths(&code[at + 3..at + end]));
                used_to = at + end;
            }
            continue;
        }
        let starts_path = matches!(word, "crate" | "super" | "self") || children.contains(word);
        if !starts_path || code[..at].trim_end().ends_with("::") || !code[at + word.len()..].starts_with("::") {
            continue;
        }
        let mut path = vec![word.to_owned()];
        let mut rest = &code[at + word.len()..];
        while let Some(next) = rest.strip_prefix("::") {
            let name: String = next.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if name.is_empty() {
                break;
            }
            rest = &next[name.len()..];
            path.push(name);
        }
        paths.push(path);
    }
    paths
}

/// The words of `code` (identifiers and keywords) with where each starts.
fn word_spans(code: &str) -> Vec<(usize, &str)> {
    let mut words = Vec::new();
    let mut start = None;
    for (i, c) in code.char_indices() {
        let word_char = c.is_alphanumeric() || c == '_';
        match (start, word_char) {
            (None, true) => start = Some(i),
            (Some(s), false) => {
                words.push((s, &code[s..i]));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        words.push((s, &code[s..]));
    }
    words
}

impl Crate {
    fn read(root: &Path) -> Crate {
        let mut files = BTreeMap::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                if path.extension().is_none_or(|e| e != "rs") || path.file_name().is_some_and(|n| n == "tests.rs") {
                    continue;
                }
                let relative = path.strip_prefix(root).unwrap().with_extension("");
                let mut module: Vec<String> = relative.iter().map(|part| part.to_string_lossy().into_owned()).collect();
                if matches!(module.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                    module.pop();
                }
                // A binary beside a library (`main.rs` with `lib.rs`) is a root of its own: the
                // library's modules are reached by the crate's name, never `crate::`.
                if path.file_name().is_some_and(|n| n == "main.rs") && root.join("lib.rs").exists() {
                    continue;
                }
                if path.components().any(|c| c.as_os_str() == "bin") {
                    continue;
                }
                if path.components().any(|c| c.as_os_str() == "tests") {
                    continue;
                }
                files.insert(module, path);
            }
        }
        // A module its parent declares only for tests (`#[cfg(test)] mod sim;`) is a test.
        let mut tests_only = Vec::new();
        for (module, file) in &files {
            let code = code_only(&std::fs::read_to_string(file).unwrap());
            let mut rest = code.as_str();
            while let Some(at) = rest.find("#[cfg(test)]") {
                rest = rest[at + "#[cfg(test)]".len()..].trim_start();
                if let Some(name) = rest.strip_prefix("mod ").and_then(|r| r.split_once(';')).map(|(n, _)| n.trim())
                    && !name.contains('{')
                {
                    tests_only.push(module.iter().cloned().chain([name.to_owned()]).collect::<Vec<_>>());
                }
            }
        }
        for module in tests_only {
            files.remove(&module);
        }
        Crate { files }
    }

    /// The file a path read in the file of module `from` resolves to: the deepest module of
    /// the crate it names (the module itself for a name defined in it).
    fn resolve(&self, from: &[String], path: &[String]) -> Option<&PathBuf> {
        let mut base: Vec<String> = from.to_vec();
        let mut rest = path;
        match rest.first().map(String::as_str) {
            Some("crate") => {
                base.clear();
                rest = &rest[1..];
            }
            Some("self") => rest = &rest[1..],
            Some("super") => {
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop();
                    rest = &rest[1..];
                }
            }
            _ => return None,
        }
        (0..=rest.len()).rev().find_map(|depth| {
            let module: Vec<String> = base.iter().chain(&rest[..depth]).cloned().collect();
            self.files.get(&module)
        })
    }

    /// Each file and the files it takes names from.
    fn graph(&self) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
        let mut graph = BTreeMap::new();
        for (module, file) in &self.files {
            let source = std::fs::read_to_string(file).unwrap();
            let code = without_visibility_paths(&without_tests(&code_only(&source)));
            let children: BTreeSet<String> = word_spans(&code)
                .windows(2)
                .filter(|pair| pair[0].1 == "mod" && code[pair[1].0 + pair[1].1.len()..].trim_start().starts_with(';'))
                .map(|pair| pair[1].1.to_owned())
                .collect();
            let mut to = BTreeSet::new();
            for path in paths_in(&code, &children) {
                let path = match path.first().map(String::as_str) {
                    Some("crate" | "super" | "self") => path,
                    Some(child) if children.contains(child) => std::iter::once("self".to_owned()).chain(path).collect(),
                    _ => continue,
                };
                if let Some(target) = self.resolve(module, &path)
                    && target != file
                {
                    to.insert(target.clone());
                }
            }
            graph.insert(file.clone(), to);
        }
        graph
    }
}

/// The loops of a graph: its strongly connected components of more than one file, each sorted.
fn loops(graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<BTreeSet<PathBuf>> {
    // Tarjan's algorithm, iteratively.
    let nodes: Vec<&PathBuf> = graph.keys().collect();
    let index_of: BTreeMap<&PathBuf, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let edges: Vec<Vec<usize>> =
        nodes.iter().map(|n| graph[*n].iter().filter_map(|t| index_of.get(t).copied()).collect()).collect();
    let (mut index, mut low, mut on_stack) =
        (vec![usize::MAX; nodes.len()], vec![0; nodes.len()], vec![false; nodes.len()]);
    let (mut stack, mut next, mut found) = (Vec::new(), 0, Vec::new());
    for start in 0..nodes.len() {
        if index[start] != usize::MAX {
            continue;
        }
        let mut work = vec![(start, 0usize)];
        while let Some(&mut (node, ref mut edge)) = work.last_mut() {
            if *edge == 0 && index[node] == usize::MAX {
                index[node] = next;
                low[node] = next;
                next += 1;
                stack.push(node);
                on_stack[node] = true;
            }
            if let Some(&to) = edges[node].get(*edge) {
                *edge += 1;
                if index[to] == usize::MAX {
                    work.push((to, 0));
                } else if on_stack[to] {
                    low[node] = low[node].min(index[to]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[node]);
            }
            if low[node] == index[node] {
                let mut component = BTreeSet::new();
                while let Some(member) = stack.pop() {
                    on_stack[member] = false;
                    component.insert(nodes[member].clone());
                    if member == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    found.push(component);
                }
            }
        }
    }
    found
}

/// An import loop: its files (relative to the repository's root, sorted, joined by spaces)
/// and the imports that tie them (`a.rs -> b.rs`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Loop {
    pub files: String,
    pub arrows: Vec<String>,
}

/// The import loops of every crate.
pub fn import_loops(root: &Path) -> Vec<Loop> {
    let mut all = Vec::new();
    for source in CRATES {
        let graph = Crate::read(&root.join(source)).graph();
        let name = |file: &PathBuf| file.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        for found in loops(&graph) {
            let files: Vec<String> = found.iter().map(name).collect();
            let arrows = found
                .iter()
                .flat_map(|from| graph[from].iter().filter(|to| found.contains(*to)).map(move |to| (from, to)))
                .map(|(from, to)| format!("{} -> {}", name(from), name(to)))
                .collect();
            all.push(Loop { files: files.join(" "), arrows });
        }
    }
    all.sort();
    all
}

/// The most lines a product file holds (its tests aside).
pub const MOST_FILE_LINES: usize = 800;
/// The most lines a function spans (its tests aside).
pub const MOST_FUNCTION_LINES: usize = 100;

/// The product files over [`MOST_FILE_LINES`] lines (their `#[cfg(test)]` modules aside) and
/// the functions over [`MOST_FUNCTION_LINES`], each as `path` or `path: name`.
pub fn too_long(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for source in CRATES {
        for file in Crate::read(&root.join(source)).files.values() {
            let name = file.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let code = without_tests(&code_only(&std::fs::read_to_string(file).unwrap()));
            if code.lines().count() > MOST_FILE_LINES {
                found.push(name.clone());
            }
            for (function, lines) in functions(&code) {
                if lines > MOST_FUNCTION_LINES {
                    found.push(format!("{name}: {function}"));
                }
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

/// Each function of `code` (cleaned) with the lines its body spans.
fn functions(code: &str) -> Vec<(String, usize)> {
    let words = word_spans(code);
    let mut found = Vec::new();
    for pair in words.windows(2) {
        let ((at, word), (_, name)) = (pair[0], pair[1]);
        if word != "fn" || code[..at].trim_end().ends_with("::") {
            continue;
        }
        // The body: the first `{` after the name at depth zero of `(`/`<`, unless a `;` comes
        // first (a declaration in a trait).
        let rest = &code[at..];
        let (mut depth, mut open) = (0i32, None);
        for (i, c) in rest.char_indices() {
            match c {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                ';' if depth == 0 => break,
                '{' if depth == 0 => {
                    open = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let Some(open) = open else { continue };
        let mut braces = 0;
        let mut close = rest.len();
        for (i, c) in rest[open..].char_indices() {
            match c {
                '{' => braces += 1,
                '}' => {
                    braces -= 1;
                    if braces == 0 {
                        close = open + i;
                        break;
                    }
                }
                _ => {}
            }
        }
        found.push((name.to_owned(), rest[..close].lines().count()));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_is_read_without_comments_strings_and_tests() {
        let source = "use crate::a; // crate::b\nlet s = \"crate::c\"; let r = r#\"crate::d\"#; let c = '\"';\n\
                      /* crate::e */ pub(in crate::k) fn f<'a>() { crate::g::h(); }\n#[cfg(test)]\nmod tests { use crate::i; }\n\
                      #[cfg(test)]\npub(crate) mod more { use crate::j; }\n";
        let code = without_visibility_paths(&without_tests(&code_only(source)));
        let paths = paths_in(&code, &BTreeSet::new());
        assert_eq!(paths, vec![vec!["crate", "a"], vec!["crate", "g", "h"]]);
        assert_eq!(
            use_paths("crate::{a::{self, b}, c as d, e::*}"),
            vec![vec!["crate", "a"], vec!["crate", "a", "b"], vec!["crate", "c"], vec!["crate", "e"]]
        );
    }

    #[test]
    fn a_loop_is_found_however_far_round() {
        let p = |s: &str| PathBuf::from(s);
        let graph: BTreeMap<PathBuf, BTreeSet<PathBuf>> = [
            (p("a"), [p("b")].into()),
            (p("b"), [p("c")].into()),
            (p("c"), [p("a"), p("d")].into()),
            (p("d"), BTreeSet::new()),
            (p("e"), [p("d")].into()),
        ]
        .into();
        assert_eq!(loops(&graph), vec![[p("a"), p("b"), p("c")].into()]);
    }

    #[test]
    fn functions_are_measured_from_their_signature_to_their_end() {
        let code = "fn short() {\n    a();\n}\ntrait T { fn declared(&self); }\n\
                    fn long(x: [u8; 2]) -> u8 {\n    let v = {\n 1 };\n    v\n}\n";
        assert_eq!(functions(code), vec![("short".to_owned(), 2), ("long".to_owned(), 4)]);
    }

    /// No product file is over [`MOST_FILE_LINES`] lines and no function over
    /// [`MOST_FUNCTION_LINES`] (tests aside): one that grows past them is split along the
    /// domain's seams, with names that say what each part holds.
    #[test]
    fn no_file_or_function_is_too_long() {
        let found = too_long(&crate::repo_root());
        assert!(
            found.is_empty(),
            "too long (split along the domain's seams: files at most {MOST_FILE_LINES} lines, functions \
             {MOST_FUNCTION_LINES}):\n{}",
            found.iter().map(|f| format!("  {f}")).collect::<Vec<_>>().join("\n"),
        );
    }

    /// No crate has an import loop: a file never imports what imports it, however far round.
    #[test]
    fn no_crate_has_an_import_loop() {
        let found = import_loops(&crate::repo_root());
        assert!(
            found.is_empty(),
            "import loops (take them apart: a file must not import what imports it):\n{}",
            found
                .iter()
                .map(|l| format!(
                    "  {}\n{}",
                    l.files,
                    l.arrows.iter().map(|a| format!("    {a}\n")).collect::<String>()
                ))
                .collect::<String>(),
        );
    }
}

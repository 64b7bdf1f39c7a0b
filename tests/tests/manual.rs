//! The manual (an mdBook under docs/): its reference pages are made from the programs
//! themselves (every command's `--help`, the admin API's OpenAPI document the server serves),
//! it builds, and every link and anchor in it leads somewhere. The settings tables are made
//! by each program's own tests (`SETTINGS` in control, the edge and the node).
//!
//! After a deliberate change, `HEARTH_BLESS=1 cargo test -p hearth-tests --test manual`
//! rewrites the made pages; review the diff.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// How the pages this file makes are written again after a deliberate change.
const BLESS: &str = "HEARTH_BLESS=1 cargo test -p hearth-tests --test manual";

fn check_made(relative: &str, made: &str) {
    hearth_io::made::check(relative, made, BLESS);
}

/// A program's `--help` for `words` (its subcommands), with no `HEARTH_*` variable set, so
/// that what clap shows of the environment is the same everywhere (and shows no secret).
fn help(binary: &Path, words: &[String]) -> String {
    let mut command = Command::new(binary);
    command.args(words).arg("--help");
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("HEARTH_") {
            command.env_remove(name);
        }
    }
    let out = command.output().unwrap();
    assert!(out.status.success(), "{} {words:?} --help: {}", binary.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The subcommands a help text lists (`help` aside).
fn subcommands(help: &str) -> Vec<String> {
    let Some(list) = help.split("\nCommands:\n").nth(1) else { return Vec::new() };
    list.lines()
        .take_while(|line| !line.trim().is_empty())
        .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// Every command of a program, depth first: its words and its help.
fn commands(binary: &Path, words: &[String], out: &mut Vec<(Vec<String>, String)>) {
    let text = help(binary, words);
    let children = subcommands(&text);
    out.push((words.to_vec(), text));
    for child in children {
        let mut deeper = words.to_vec();
        deeper.push(child);
        commands(binary, &deeper, out);
    }
}

/// Every command of the three programs, as `hearth-control user add` and its help.
fn every_command() -> Vec<(String, String)> {
    let mut all = Vec::new();
    for program in ["hearth-control", "hearth-edge", "hearth-node"] {
        let binary = hearth_tests::binary(program).unwrap();
        let mut found = Vec::new();
        commands(&binary, &[], &mut found);
        for (words, text) in found {
            let name = std::iter::once(program.to_owned()).chain(words).collect::<Vec<_>>().join(" ");
            all.push((name, text));
        }
    }
    all
}

fn commands_page() -> String {
    let mut page = String::from(
        "<!-- Made from the programs' own --help by tests/tests/manual.rs: \
         HEARTH_BLESS=1 cargo test -p hearth-tests --test manual -->\n# Commands\n\n\
         Every command of `hearth-control`, `hearth-edge` and `hearth-node`, as its `--help` \
         shows it. Options with an `env:` can be set from that environment variable instead.\n",
    );
    for (name, text) in every_command() {
        let depth = name.split(' ').count();
        page.push_str(&format!("\n{} {name}\n\n```text\n{}\n```\n", "#".repeat(depth + 1), text.trim_end()));
    }
    page
}

#[test]
fn the_commands_page_is_what_the_programs_say() {
    check_made("docs/reference/commands.md", &commands_page());
}

/// `text` with `<` and `>` outside code spans written as entities, so that `<admin prefix>`
/// shows as it is instead of opening an HTML tag.
fn escaped(text: &str) -> String {
    text.split('`')
        .enumerate()
        .map(|(i, part)| if i % 2 == 0 { part.replace('<', "&lt;").replace('>', "&gt;") } else { part.to_owned() })
        .collect::<Vec<_>>()
        .join("`")
}

/// What a schema is, in a few words: `string (at most 64)`, a link to a named one, ...
fn kind(schema: &Value) -> String {
    if let Some(name) = schema["$ref"].as_str().and_then(|r| r.strip_prefix("#/components/schemas/")) {
        return format!("[{name}](#{})", name.to_ascii_lowercase());
    }
    let mut out = match &schema["type"] {
        Value::String(one) => one.clone(),
        Value::Array(many) => many.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" or "),
        _ if schema["oneOf"].is_array() || schema["anyOf"].is_array() => {
            let options = schema["oneOf"].as_array().or(schema["anyOf"].as_array()).unwrap();
            options.iter().map(kind).collect::<Vec<_>>().join(" or ")
        }
        _ => "any".to_owned(),
    };
    if out == "array" {
        out = format!("list of {}", kind(&schema["items"]));
    }
    if let Some(values) = schema["enum"].as_array() {
        let values: Vec<String> =
            values.iter().map(|v| format!("`{}`", v.as_str().map_or_else(|| v.to_string(), str::to_owned))).collect();
        out.push_str(&format!(": {}", values.join(", ")));
    }
    let mut bounds = Vec::new();
    for (key, word) in [
        ("minLength", "at least"),
        ("maxLength", "at most"),
        ("minItems", "at least"),
        ("maxItems", "at most"),
        ("minimum", "from"),
        ("maximum", "to"),
    ] {
        if let Some(bound) = schema.get(key) {
            bounds.push(format!("{word} {bound}"));
        }
    }
    if !bounds.is_empty() {
        out.push_str(&format!(" ({})", bounds.join(", ")));
    }
    out
}

/// The rows of an object schema's fields (`speed_limit.up` for a field of a field).
fn fields(schema: &Value, prefix: &str, rows: &mut Vec<String>) {
    let required: BTreeSet<&str> =
        schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let Some(properties) = schema["properties"].as_object() else { return };
    for (name, field) in properties {
        let meaning = escaped(field["description"].as_str().unwrap_or("")).replace('|', "\\|").replace('\n', " ");
        let needed = if required.contains(name.as_str()) { "yes" } else { "" };
        rows.push(format!("| `{prefix}{name}` | {} | {needed} | {meaning} |", kind(field).replace('|', "\\|")));
        if field["properties"].is_object() {
            fields(field, &format!("{prefix}{name}."), rows);
        }
    }
}

fn fields_table(schema: &Value) -> String {
    let mut rows = Vec::new();
    fields(schema, "", &mut rows);
    if rows.is_empty() {
        return format!("{}\n", kind(schema));
    }
    format!("| field | type | required | meaning |\n|---|---|---|---|\n{}\n", rows.join("\n"))
}

fn api_page() -> String {
    let text = std::fs::read_to_string(hearth_tests::repo_root().join("docs/admin-api.openapi.json")).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    let mut page = String::from(
        "<!-- Made from docs/admin-api.openapi.json (what control serves at /<admin prefix>/api/openapi.json) \
         by tests/tests/manual.rs: HEARTH_BLESS=1 cargo test -p hearth-tests --test manual -->\n\
         # Every operation of the admin API\n\n",
    );
    page.push_str(&format!("{}\n\n", escaped(doc["info"]["description"].as_str().unwrap())));
    page.push_str("Every error answers a JSON [Error](#error) with the status given.\n");
    for (path, operations) in doc["paths"].as_object().unwrap() {
        for (method, operation) in operations.as_object().unwrap() {
            // In code: mdBook would read `{id}` at a heading's end as its attributes.
            page.push_str(&format!("\n## `{} {path}`\n\n", method.to_ascii_uppercase()));
            page.push_str(&format!("{}.", escaped(operation["summary"].as_str().unwrap_or("").trim_end_matches('.'))));
            if let Some(description) = operation["description"].as_str() {
                page.push_str(&format!(" {}", escaped(description)));
            }
            page.push('\n');
            if let Some(parameters) = operation["parameters"].as_array() {
                page.push_str("\n| parameter | in | type | required | meaning |\n|---|---|---|---|---|\n");
                for parameter in parameters {
                    let needed = if parameter["required"].as_bool() == Some(true) { "yes" } else { "" };
                    page.push_str(&format!(
                        "| `{}` | {} | {} | {needed} | {} |\n",
                        parameter["name"].as_str().unwrap(),
                        parameter["in"].as_str().unwrap(),
                        kind(&parameter["schema"]).replace('|', "\\|"),
                        escaped(parameter["description"].as_str().unwrap_or("")).replace('|', "\\|"),
                    ));
                }
            }
            if let Some(content) = operation["requestBody"]["content"].as_object() {
                for (media, body) in content {
                    page.push_str(&format!("\nThe body (`{media}`):\n\n{}", fields_table(&body["schema"])));
                }
            }
            // Grouped by what they carry, the groups in the order of their first status.
            let mut answers: Vec<(String, Vec<String>)> = Vec::new();
            for (status, response) in operation["responses"].as_object().unwrap() {
                let what = match response["$ref"].as_str() {
                    Some(_) => "an error".to_owned(),
                    None => match response["content"]["application/json"]["schema"].as_object() {
                        Some(_) => kind(&response["content"]["application/json"]["schema"]),
                        None => response["description"].as_str().unwrap_or("").to_owned(),
                    },
                };
                match answers.iter_mut().find(|(known, _)| *known == what) {
                    Some((_, statuses)) => statuses.push(status.clone()),
                    None => answers.push((what, vec![status.clone()])),
                }
            }
            let answers: Vec<String> =
                answers.into_iter().map(|(what, statuses)| format!("{}: {what}", statuses.join(", "))).collect();
            page.push_str(&format!("\nAnswers {}.\n", answers.join("; ")));
        }
    }
    page.push_str("\n## Schemas\n");
    for (name, schema) in doc["components"]["schemas"].as_object().unwrap() {
        page.push_str(&format!("\n### {name}\n\n"));
        if let Some(description) = schema["description"].as_str() {
            page.push_str(&format!("{}\n\n", escaped(description)));
        }
        page.push_str(&fields_table(schema));
    }
    page
}

#[test]
fn the_api_page_is_the_openapi_document_rendered() {
    check_made("docs/reference/admin-api.md", &api_page());
}

/// Every `href` and `src` of an HTML page.
fn references(html: &str) -> Vec<String> {
    let mut found = Vec::new();
    for attribute in ["href=\"", "src=\""] {
        for part in html.split(attribute).skip(1) {
            if let Some(end) = part.find('"') {
                found.push(part[..end].replace("&amp;", "&"));
            }
        }
    }
    found
}

/// The `id`s of an HTML page (what `#anchor` may name).
fn ids(html: &str) -> BTreeSet<String> {
    html.split(" id=\"").skip(1).filter_map(|part| part.find('"').map(|end| part[..end].to_owned())).collect()
}

fn html_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            html_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "html") {
            out.push(path);
        }
    }
}

/// The links of a built book that lead nowhere: a file that is not there, or an anchor its
/// page does not have. Links off the book (`https:`, `mailto:`) are not followed.
fn broken_links(book: &Path) -> Vec<String> {
    let mut pages = Vec::new();
    html_files(book, &mut pages);
    let mut anchors: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    let mut broken = Vec::new();
    for page in &pages {
        // The print page and 404 page repeat the others' links with other bases.
        let name = page.file_name().unwrap().to_string_lossy();
        if name == "print.html" || name == "404.html" || name == "toc.html" {
            continue;
        }
        let html = std::fs::read_to_string(page).unwrap();
        for reference in references(&html) {
            if reference.contains(':') || reference.is_empty() {
                continue;
            }
            let (file, anchor) = reference.split_once('#').unwrap_or((&reference, ""));
            let file = file.split('?').next().unwrap();
            let target = if file.is_empty() { page.clone() } else { page.parent().unwrap().join(file) };
            let Ok(target) = target.canonicalize() else {
                broken.push(format!("{}: {reference} (no such file)", page.strip_prefix(book).unwrap().display()));
                continue;
            };
            if !anchor.is_empty() && target.extension().is_some_and(|e| e == "html") {
                let ids =
                    anchors.entry(target.clone()).or_insert_with(|| ids(&std::fs::read_to_string(&target).unwrap()));
                if !ids.contains(anchor) {
                    broken
                        .push(format!("{}: {reference} (no such anchor)", page.strip_prefix(book).unwrap().display()));
                }
            }
        }
    }
    broken
}

/// Builds the book into `out`; mdBook's warnings (an HTML tag left open, an include that is
/// not there) fail it.
fn build_book(out: &Path) {
    let built = Command::new("bash")
        .arg(hearth_tests::repo_root().join("docs/build.sh"))
        .arg(out)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&built.stdout), String::from_utf8_lossy(&built.stderr));
    assert!(built.status.success(), "docs/build.sh failed:\n{said}");
    assert!(!said.contains(" WARN ") && !said.contains("ERROR"), "mdBook warned:\n{said}");
}

#[test]
fn the_manual_builds_and_every_link_and_anchor_leads_somewhere() {
    let temp = tempfile::tempdir().unwrap();
    let book = temp.path().join("book");
    build_book(&book);
    for chapter in [
        "index.html",
        "getting-started.html",
        "reference/settings.html",
        "reference/commands.html",
        "reference/admin-api.html",
    ] {
        assert!(book.join(chapter).is_file(), "{chapter} was not built");
    }
    // The settings tables were included (not left as `{{#include}}`).
    let settings = std::fs::read_to_string(book.join("reference/settings.html")).unwrap();
    assert!(!settings.contains("{{#include"), "an include was left as it is");
    for name in ["HEARTH_LISTEN", "HEARTH_FEED_SECS", "masquerade_tcp"] {
        assert!(settings.contains(name), "{name} is not in the settings page");
    }
    let broken = broken_links(&book);
    assert!(broken.is_empty(), "links that lead nowhere:\n{}", broken.join("\n"));

    // The check finds what is broken: a page with a link to a missing page and a missing anchor.
    std::fs::write(
        book.join("broken.html"),
        "<a href=\"nowhere.html\">x</a> <a href=\"index.html#no-such-anchor\">y</a> <a href=\"#here\" id=\"here\">z</a>",
    )
    .unwrap();
    let broken = broken_links(&book);
    assert_eq!(broken.len(), 2, "{broken:?}");
}

/// The hand-written pages, code blocks included.
fn pages() -> Vec<(String, String)> {
    let docs = hearth_tests::repo_root().join("docs");
    let mut out = Vec::new();
    let mut stack = vec![docs.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                let name = path.strip_prefix(&docs).unwrap().to_string_lossy().into_owned();
                out.push((name, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// Every source file of the project outside docs/ and target/, as one text.
fn sources() -> String {
    let root = hearth_tests::repo_root();
    let mut text = String::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !["target", "docs", ".git", "node_modules", "fixtures", "corpus", "build"].contains(&name.as_str()) {
                    stack.push(path);
                }
            } else if ["rs", "sh", "toml", "js", "service"].iter().any(|ext| name.ends_with(&format!(".{ext}")))
                || name == "run"
                || name == "bench"
            {
                text.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
            }
        }
    }
    text
}

/// The manual names no command the programs do not have (`hearth-control user ad` is caught,
/// `hearth-control user add NAME` is not), and no `HEARTH_*` variable the
/// code does not know: what a page tells a person to run exists.
#[test]
fn the_manual_names_only_commands_and_variables_that_exist() {
    let commands: BTreeSet<String> = every_command().into_iter().map(|(name, _)| name).collect();
    let code = sources();
    let mut wrong = Vec::new();
    for (page, text) in pages() {
        if page.starts_with("reference/") || page == "benchmarks.md" {
            continue;
        }
        let runs = ["hearth-control ", "hearth-node ", "hearth-edge "]
            .into_iter()
            .flat_map(|program| text.match_indices(program));
        for (at, _) in runs {
            // Only where it is run: in code (after a backtick, or first on a line of a
            // command), not where prose names the program.
            let line = text[..at].rsplit('\n').next().unwrap().trim();
            if !(line.ends_with('`')
                || line.is_empty()
                || line.ends_with("&&")
                || line.ends_with("sudo")
                || line.ends_with("hearth"))
            {
                continue;
            }
            // The longest command the words after it name (`hearth-control user add NAME`).
            let words: Vec<&str> = text[at..].split([' ', '\n', '`', '(', ')', ',', ':', ';']).take(4).collect();
            let named = (1..=words.len())
                .rev()
                .map(|n| words[..n].join(" "))
                .find(|name| commands.contains(name))
                .unwrap_or_default();
            // The word after the command names a subcommand it does not have.
            let next = words.get(named.split(' ').count()).copied().unwrap_or("");
            let has_subcommands = commands.iter().any(|name| name.starts_with(&format!("{named} ")));
            if has_subcommands && next.chars().all(|c| c.is_ascii_lowercase() || c == '-') && !next.is_empty() {
                wrong.push(format!("{page}: `{}` is not a command", words.join(" ")));
            }
        }
        for word in text.split(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')) {
            if word.starts_with("HEARTH_")
                && word.len() > "HEARTH_".len()
                && !word.ends_with('_')
                && !code.contains(word)
            {
                wrong.push(format!("{page}: {word} is not in the code"));
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(wrong.is_empty(), "the manual names what does not exist:\n{}", wrong.join("\n"));
}

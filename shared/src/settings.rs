//! The settings of Hearth's programs as data: each program lists what it reads (its key in a
//! file, its environment variable, its default and what it means), its loader reads exactly
//! those names (each program's tests check that), and the manual's tables are rendered from
//! the same lists ([`table`]), so the two cannot drift.

/// One setting, or a few that go together (`tls_cert, tls_key`): names in a row are
/// separated by `", "`.
#[derive(Clone, Copy, Debug)]
pub struct Setting {
    /// Its key in the program's TOML file (`acme.domain` for `domain` under `[acme]`); empty
    /// when there is none.
    pub key: &'static str,
    /// Its environment variable; empty when there is none.
    pub env: &'static str,
    /// What holds when it is not set, as a person would write it (Markdown).
    pub default: &'static str,
    /// What it does (Markdown).
    pub meaning: &'static str,
}

impl Setting {
    /// The file keys of this row.
    pub fn keys(&self) -> impl Iterator<Item = &'static str> {
        names(self.key)
    }

    /// The environment variables of this row.
    pub fn envs(&self) -> impl Iterator<Item = &'static str> {
        names(self.env)
    }
}

fn names(list: &'static str) -> impl Iterator<Item = &'static str> {
    list.split(", ").filter(|name| !name.is_empty())
}

/// A Markdown table of `settings`: the setting (its file key, and below it its environment
/// variable, when it has them), its default and what it means. Three columns, so that the
/// meaning has the room on a page.
pub fn table(settings: &[Setting]) -> String {
    let code = |list: &'static str| names(list).map(|name| format!("`{name}`")).collect::<Vec<_>>().join(", ");
    let mut out = String::from("| setting | default | meaning |\n|---|---|---|\n");
    for setting in settings {
        let names: Vec<String> = [setting.key, setting.env].into_iter().filter(|n| !n.is_empty()).map(code).collect();
        let cells = [names.join("<br>"), setting.default.to_owned(), setting.meaning.to_owned()];
        out.push_str(&format!("| {} |\n", cells.join(" | ").replace('\n', " ")));
    }
    out
}

/// The `HEARTH_*` variables a program's configuration code names, from its source: `source`
/// is the file, `list` what starts its settings list when the file holds it (`pub const
/// SETTINGS`; the list ends at the first line `];` after it, and is left out; empty: the list
/// is elsewhere), and the tests from `#[cfg(test)]\nmod` on are left out. For the tests that
/// check a program's settings list against what it reads.
pub fn variables_named(source: &str, list: &str) -> std::collections::BTreeSet<String> {
    let product = source.split("#[cfg(test)]\nmod ").next().unwrap_or(source);
    let (before, after) = match product.split_once(list).filter(|_| !list.is_empty()) {
        Some((before, rest)) => (before, rest.split_once("\n];\n").map_or("", |(_, after)| after)),
        None => (product, ""),
    };
    [before, after]
        .into_iter()
        .flat_map(|text| text.split(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')))
        .filter(|word| word.starts_with("HEARTH_") && word.len() > "HEARTH_".len())
        .map(str::to_owned)
        .collect()
}

/// The field names a serde type refuses an unknown one with: `error` is the message of
/// deserializing a value that has an unknown field (`unknown field `x`, expected one of `a`,
/// `b``, or ``expected `a` or `b``). For the tests that check a program's settings list against its file format.
pub fn expected_fields(error: &str) -> Vec<String> {
    let Some(rest) = error.split("expected ").nth(1) else { return Vec::new() };
    let rest = rest.strip_prefix("one of ").unwrap_or(rest);
    rest.split(", ")
        .flat_map(|part| part.split(" or "))
        .filter_map(|name| name.split('`').nth(1))
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_names_each_setting_by_its_key_and_variable() {
        let rows = [
            Setting { key: "tls_cert, tls_key", env: "", default: "`tls.crt`", meaning: "PEM\nfiles" },
            Setting { key: "listen", env: "", default: "none", meaning: "where" },
        ];
        assert_eq!(
            table(&rows),
            "| setting | default | meaning |\n|---|---|---|\n| `tls_cert`, `tls_key` | `tls.crt` | PEM files |\n\
             | `listen` | none | where |\n"
        );
        let both = [Setting { key: "listen", env: "HEARTH_LISTEN", default: "none", meaning: "where" }];
        assert_eq!(
            table(&both),
            "| setting | default | meaning |\n|---|---|---|\n| `listen`<br>`HEARTH_LISTEN` | none | where |\n"
        );
        assert_eq!(rows[0].keys().collect::<Vec<_>>(), ["tls_cert", "tls_key"]);
        assert_eq!(rows[0].envs().count(), 0);
    }

    #[test]
    fn variables_named_leaves_the_list_and_the_tests_out() {
        let source = "let a = env(\"HEARTH_A\");\npub const SETTINGS: &[Setting] = &[\n    \"HEARTH_LISTED\",\n];\n\
                      // HEARTH_B_2 too\n#[cfg(test)]\nmod tests { HEARTH_TEST }";
        let named: Vec<String> = variables_named(source, "pub const SETTINGS").into_iter().collect();
        assert_eq!(named, ["HEARTH_A", "HEARTH_B_2"]);
        let everything: Vec<String> = variables_named(source, "").into_iter().collect();
        assert_eq!(everything, ["HEARTH_A", "HEARTH_B_2", "HEARTH_LISTED"]);
    }

    #[test]
    fn expected_fields_reads_serdes_message() {
        assert_eq!(expected_fields("unknown field `x`, expected one of `a`, `b_c`"), ["a", "b_c"]);
        assert_eq!(expected_fields("unknown field `x`, expected `only`"), ["only"]);
        assert_eq!(expected_fields("unknown field `x`, expected `up` or `down`"), ["up", "down"]);
        assert!(expected_fields("invalid type").is_empty());
    }
}

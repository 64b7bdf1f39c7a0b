//! Copies the request bodies of control's admin and node APIs, as control declares them, into
//! this crate: control is a binary, so its types cannot be imported, and a copy kept by hand
//! would drift. Each item is taken verbatim (attributes, fields, serde options) from the file
//! named here; a body that is renamed or moved stops this build with its name.

use std::fmt::Write as _;
use std::path::PathBuf;

/// (file under control/src, item). The API's bodies and the types they contain; an item is a
/// struct or enum by name, or another item by the start of its first line (`impl Mbps`,
/// `const MAX_DEVICES`).
const ITEMS: &[(&str, &str)] = &[
    ("api/admin/access.rs", "SetupRequest"),
    ("api/admin/access.rs", "LoginRequest"),
    ("api/admin/access.rs", "TotpConfirm"),
    ("api/admin/access.rs", "TotpDisable"),
    ("api/admin/settings.rs", "SettingsInput"),
    ("api/admin/users.rs", "BulkRequest"),
    ("api/admin/users.rs", "ExtendRequest"),
    ("api/admin/nodes.rs", "RolloutRequest"),
    ("api/admin/access.rs", "TokenRequest"),
    ("store/user_input.rs", "UserInput"),
    ("store/user_input.rs", "SpeedInput"),
    ("store/user_input.rs", "Mbps"),
    ("store/user_input.rs", "impl Mbps"),
    ("store/user_input.rs", "impl Serialize for Mbps"),
    ("store/user_input.rs", "impl<'de> Deserialize<'de> for Mbps"),
    ("store/user_input.rs", "DeviceLimit"),
    ("store/user_input.rs", "const MAX_DEVICES"),
    ("store/user_input.rs", "impl<'de> Deserialize<'de> for DeviceLimit"),
    ("store/node_input.rs", "NodeInput"),
    ("store/groups.rs", "GroupInput"),
    ("store/groups.rs", "GroupSpeed"),
    ("store/enrollment.rs", "EnrollRequest"),
    ("settings.rs", "ProfileInput"),
    ("auth/principal.rs", "Scope"),
    ("api/admin/edges.rs", "EdgeInput"),
    ("api/admin/edges.rs", "EdgeChange"),
    ("api/admin/webhooks.rs", "WebhookInput"),
    ("store/admins.rs", "AdminInput"),
    ("store/admins.rs", "fn present"),
    ("store/admins.rs", "Role"),
];

/// The item `name` of `source` (a struct or enum by its name, anything else by the start of
/// its first line), from its first attribute to its closing brace at the start of a line, or
/// to its line's end for an item of one line (`;`).
fn item(source: &str, name: &str) -> Option<String> {
    let lines: Vec<&str> = source.lines().collect();
    let at = lines.iter().position(|line| {
        let line = line
            .trim_start()
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub(in crate::api) ")
            .trim_start_matches("pub(super) ")
            .trim_start_matches("pub ");
        let named = |kind: &str| [' ', '('].iter().any(|after| line.starts_with(&format!("{kind} {name}{after}")));
        let first_line = line.strip_prefix(name).is_some_and(|rest| rest.starts_with([' ', ':', '<']));
        named("struct") || named("enum") || (name.contains(' ') && first_line)
    })?;
    let one_line = lines[at].trim_end().ends_with(';');
    let mut start = at;
    while start > 0 && {
        let above = lines[start - 1].trim_start();
        above.starts_with("#[") || above.starts_with("///")
    } {
        start -= 1;
    }
    let end = if one_line { at } else { at + lines[at..].iter().position(|line| *line == "}")? };
    Some(lines[start..=end].join("\n"))
}

fn main() {
    let control = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../control/src");
    let mut out = String::new();
    for (file, name) in ITEMS {
        let path = control.join(file);
        println!("cargo:rerun-if-changed={}", path.display());
        let source = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let item = item(&source, name).unwrap_or_else(|| {
            panic!("control's request body {name} is no longer in {}: update tests/fuzz/build.rs", path.display())
        });
        let item = item
            .replace("pub(crate) ", "pub ")
            .replace("pub(in crate::api) ", "pub ")
            .replace("pub(super) ", "pub ")
            .replace("crate::settings::", "");
        let item = match item.find(&format!("struct {name}")).or_else(|| item.find(&format!("enum {name}"))) {
            _ if name.contains(' ') => item,
            Some(at) if !item[..at].ends_with("pub ") => format!("{}pub {}", &item[..at], &item[at..]),
            _ => item,
        };
        writeln!(out, "// control/src/{file}\n{item}\n").unwrap();
    }
    let dest = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("control_bodies.rs");
    std::fs::write(dest, out).unwrap();
}

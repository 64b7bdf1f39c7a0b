//! Which app to install on which device, where to get it, and the link that imports a
//! subscription into it: the set-up steps of the subscription page.

use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};

/// A kind of device the page has set-up steps for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Platform {
    /// Android phones and tablets (and anything the page cannot tell).
    #[default]
    Android,
    /// iPhone and iPad.
    Ios,
    /// Windows.
    Windows,
    /// macOS.
    MacOs,
    /// Linux desktops.
    Linux,
}

impl Platform {
    /// Every platform, in the order the page's switch lists them.
    pub const ALL: [Platform; 5] =
        [Platform::Android, Platform::Ios, Platform::Windows, Platform::MacOs, Platform::Linux];

    /// The platform's name in `?os=`.
    pub fn code(self) -> &'static str {
        match self {
            Platform::Android => "android",
            Platform::Ios => "ios",
            Platform::Windows => "windows",
            Platform::MacOs => "macos",
            Platform::Linux => "linux",
        }
    }

    /// The platform's name as people know it (the same in every language).
    pub fn name(self) -> &'static str {
        match self {
            Platform::Android => "Android",
            Platform::Ios => "iPhone / iPad",
            Platform::Windows => "Windows",
            Platform::MacOs => "macOS",
            Platform::Linux => "Linux",
        }
    }

    /// The platform `?os=` names.
    pub fn from_code(code: &str) -> Option<Platform> {
        Platform::ALL.into_iter().find(|p| code.eq_ignore_ascii_case(p.code()))
    }

    /// The platform a browser's User-Agent names; Android when it names none the page knows.
    /// iPhones say "like Mac OS X" and Android says "Linux": those are asked first. (An iPad
    /// in desktop mode says Macintosh: it gets macOS, and the switch.)
    pub fn from_user_agent(user_agent: &str) -> Platform {
        let has = |word: &str| user_agent.contains(word);
        if has("iPhone") || has("iPad") || has("iPod") {
            Platform::Ios
        } else if has("Android") {
            Platform::Android
        } else if has("Windows") {
            Platform::Windows
        } else if has("Macintosh") || has("Mac OS X") {
            Platform::MacOs
        } else if has("Linux") || has("X11") || has("CrOS") {
            Platform::Linux
        } else {
            Platform::Android
        }
    }

    /// Whether a person opening the page on this platform holds the phone the app runs on
    /// (then the page offers buttons, not a QR code to scan).
    pub fn is_phone(self) -> bool {
        matches!(self, Platform::Android | Platform::Ios)
    }

    /// The apps for this platform, the one the page recommends first.
    pub fn apps(self) -> &'static [App] {
        match self {
            Platform::Android => &[HIDDIFY_ANDROID, HAPP_ANDROID, SING_BOX_ANDROID, FLCLASH_ANDROID],
            Platform::Ios => &[HIDDIFY_IOS, HAPP_IOS, SING_BOX_APPLE, SURGE_IOS, LOON_IOS],
            Platform::Windows => &[HIDDIFY_WINDOWS, CLASH_VERGE_WINDOWS],
            Platform::MacOs => &[HIDDIFY_MACOS, SING_BOX_APPLE, CLASH_VERGE_MACOS],
            Platform::Linux => &[HIDDIFY_LINUX, CLASH_VERGE_LINUX],
        }
    }
}

/// Where an app is downloaded from: the store of the device, or the very file for it. Never a
/// website or a page of releases to find one's way through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    /// Google Play: the app's page.
    GooglePlay,
    /// Apple's App Store: the app's page.
    AppStore,
    /// The file for this platform, from the newest release (`releases/latest/download/<file>`
    /// on GitHub: the same address whatever the version).
    File,
    /// An app whose files carry their version in the name, so that no address stays right:
    /// its newest release, and which of its files to take (`x64-setup.exe`).
    Newest(&'static str),
}

impl Store {
    /// The file a [`Store::File`] address downloads, for its label.
    pub fn file_name(url: &str) -> &str {
        url.rsplit('/').next().unwrap_or(url)
    }
}

/// How an app takes a subscription from a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Import {
    /// `hiddify://import/<url>#<name>`.
    Hiddify,
    /// `sing-box://import-remote-profile?url=<url>#<name>`.
    SingBox,
    /// `clash://install-config?url=<url>&name=<name>` (Clash Verge, FlClash and the others).
    Clash,
    /// `happ://add/<url>`.
    Happ,
    /// `surge:///install-config?url=<url>`: Surge installs the profile the link serves it,
    /// managed, so it updates itself (Surge's manual, tools/url-scheme). The scheme takes no
    /// name.
    Surge,
    /// `loon://import?sub=<url>`: Loon imports the profile as a remote configuration (Loon's
    /// manual, "URL Scheme", Import resources). The scheme takes no name.
    Loon,
}

impl Import {
    /// Whether the link names the subscription (the title the owner wrote): the schemes of
    /// Happ, Surge and Loon take the link alone.
    pub fn names_the_subscription(self) -> bool {
        !matches!(self, Import::Happ | Import::Surge | Import::Loon)
    }

    /// The link that imports the subscription at `sub_url`, named `name` (as the owner wrote
    /// it: percent-encoded here, HTML-escaped where the page writes it).
    pub fn link(self, sub_url: &str, name: &str) -> String {
        let url = utf8_percent_encode(sub_url, NON_ALPHANUMERIC);
        let name = utf8_percent_encode(name, NON_ALPHANUMERIC);
        match self {
            Import::Hiddify => format!("hiddify://import/{sub_url}#{name}"),
            Import::SingBox => format!("sing-box://import-remote-profile?url={url}#{name}"),
            Import::Clash => format!("clash://install-config?url={url}&name={name}"),
            Import::Happ => format!("happ://add/{sub_url}"),
            Import::Surge => format!("surge:///install-config?url={url}"),
            Import::Loon => format!("loon://import?sub={url}"),
        }
    }
}

/// An app, where to get it for one platform, and how it imports.
#[derive(Clone, Copy, Debug)]
pub struct App {
    /// Its name.
    pub name: &'static str,
    /// Where to get it, best first.
    pub stores: &'static [(Store, &'static str)],
    /// How it imports a subscription.
    pub import: Import,
}

// Hiddify names its release files the same in every release, so `latest/download` always
// gives the newest one; the universal APK is for phones without Google Play (Play is closed
// to people in Iran).
macro_rules! hiddify_file {
    ($file:literal) => {
        concat!("https://github.com/hiddify/hiddify-app/releases/latest/download/", $file)
    };
}
const HIDDIFY_ANDROID: App = App {
    name: "Hiddify",
    stores: &[
        (Store::GooglePlay, "https://play.google.com/store/apps/details?id=app.hiddify.com"),
        (Store::File, hiddify_file!("Hiddify-Android-universal.apk")),
    ],
    import: Import::Hiddify,
};
const HIDDIFY_IOS: App = App {
    name: "Hiddify",
    stores: &[(Store::AppStore, "https://apps.apple.com/app/id6596777532")],
    import: Import::Hiddify,
};
const HIDDIFY_WINDOWS: App = App {
    name: "Hiddify",
    stores: &[(Store::File, hiddify_file!("Hiddify-Windows-Setup-x64.exe"))],
    import: Import::Hiddify,
};
const HIDDIFY_MACOS: App =
    App { name: "Hiddify", stores: &[(Store::File, hiddify_file!("Hiddify-MacOS.dmg"))], import: Import::Hiddify };
const HIDDIFY_LINUX: App = App {
    name: "Hiddify",
    stores: &[(Store::File, hiddify_file!("Hiddify-Linux-x64.AppImage"))],
    import: Import::Hiddify,
};
const HAPP_ANDROID: App = App {
    name: "Happ",
    stores: &[(Store::GooglePlay, "https://play.google.com/store/apps/details?id=com.happproxy")],
    import: Import::Happ,
};
const HAPP_IOS: App =
    App { name: "Happ", stores: &[(Store::AppStore, "https://apps.apple.com/app/id6504287215")], import: Import::Happ };
const SING_BOX_ANDROID: App = App {
    name: "sing-box",
    stores: &[
        (Store::GooglePlay, "https://play.google.com/store/apps/details?id=io.nekohasekai.sfa"),
        (Store::Newest("universal.apk"), "https://github.com/SagerNet/sing-box/releases/latest"),
    ],
    import: Import::SingBox,
};
/// sing-box for iPhone, iPad and Mac: "sing-box VT" in the App Store.
const SING_BOX_APPLE: App = App {
    name: "sing-box",
    stores: &[(Store::AppStore, "https://apps.apple.com/app/id6673731168")],
    import: Import::SingBox,
};
/// Surge 5 for iPhone and iPad (Hysteria 2 from 5.8). Surge for Mac is sold on Surge's own
/// site, not in a store, so the page does not offer it; a Mac's Surge still gets its profile.
const SURGE_IOS: App = App {
    name: "Surge",
    stores: &[(Store::AppStore, "https://apps.apple.com/app/id1442620678")],
    import: Import::Surge,
};
const LOON_IOS: App =
    App { name: "Loon", stores: &[(Store::AppStore, "https://apps.apple.com/app/id1373567447")], import: Import::Loon };
const FLCLASH_ANDROID: App = App {
    name: "FlClash",
    stores: &[(Store::Newest("android-arm64-v8a.apk"), "https://github.com/chen08209/FlClash/releases/latest")],
    import: Import::Clash,
};
const CLASH_VERGE_RELEASES: &str = "https://github.com/clash-verge-rev/clash-verge-rev/releases/latest";
const CLASH_VERGE_WINDOWS: App = App {
    name: "Clash Verge Rev",
    stores: &[(Store::Newest("x64-setup.exe"), CLASH_VERGE_RELEASES)],
    import: Import::Clash,
};
const CLASH_VERGE_MACOS: App = App {
    name: "Clash Verge Rev",
    stores: &[(Store::Newest("aarch64.dmg"), CLASH_VERGE_RELEASES)],
    import: Import::Clash,
};
const CLASH_VERGE_LINUX: App = App {
    name: "Clash Verge Rev",
    stores: &[(Store::Newest("amd64.deb"), CLASH_VERGE_RELEASES)],
    import: Import::Clash,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platforms_from_browsers() {
        let cases = [
            (
                "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 Version/18.1 Mobile/15E148 Safari/604.1",
                Platform::Ios,
            ),
            ("Mozilla/5.0 (iPad; CPU OS 17_0 like Mac OS X) AppleWebKit/605.1.15", Platform::Ios),
            (
                "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 Chrome/131.0 Mobile Safari/537.36",
                Platform::Android,
            ),
            (
                "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/131.0 Safari/537.36",
                Platform::Windows,
            ),
            (
                "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 Version/18.1 Safari/605.1.15",
                Platform::MacOs,
            ),
            ("Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0", Platform::Linux),
            ("Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36", Platform::Linux),
            ("curl/8.5", Platform::Android),
        ];
        for (ua, platform) in cases {
            assert_eq!(Platform::from_user_agent(ua), platform, "{ua}");
        }
        for platform in Platform::ALL {
            assert_eq!(Platform::from_code(platform.code()), Some(platform));
            assert!(!platform.apps().is_empty());
            assert_eq!(platform.apps()[0].import, Import::Hiddify, "Hiddify first: it runs everywhere");
        }
        assert_eq!(Platform::from_code("MacOS"), Some(Platform::MacOs));
        assert_eq!(Platform::from_code("beos"), None);
    }

    #[test]
    fn every_store_link_is_https() {
        for platform in Platform::ALL {
            for app in platform.apps() {
                for (_, url) in app.stores {
                    assert!(url.starts_with("https://") && !url.contains(['"', '<', '&']), "{url}");
                }
            }
        }
    }

    /// Each link gets the app for this device: its store's page, or its file for this
    /// platform. The app the page recommends is always one click from installing; a release
    /// page is only for an app whose files carry their version, and says which file to take
    /// (issue 45, 14).
    #[test]
    fn every_link_gets_the_app_for_the_device() {
        for platform in Platform::ALL {
            for (i, app) in platform.apps().iter().enumerate() {
                assert!(!app.stores.is_empty(), "{} on {platform:?}", app.name);
                for (store, url) in app.stores {
                    match store {
                        Store::GooglePlay => {
                            assert_eq!(platform, Platform::Android);
                            assert!(url.starts_with("https://play.google.com/store/apps/details?id="), "{url}");
                        }
                        Store::AppStore => {
                            assert!(matches!(platform, Platform::Ios | Platform::MacOs), "{url}");
                            assert!(url.starts_with("https://apps.apple.com/app/id"), "{url}");
                        }
                        Store::File => {
                            assert!(
                                url.starts_with("https://github.com/") && url.contains("/releases/latest/download/")
                            );
                            let ending = match platform {
                                Platform::Android => ".apk",
                                Platform::Ios => ".ipa",
                                Platform::Windows => ".exe",
                                Platform::MacOs => ".dmg",
                                Platform::Linux => ".AppImage",
                            };
                            assert!(Store::file_name(url).ends_with(ending), "{url} on {platform:?}");
                        }
                        Store::Newest(file) => {
                            assert!(i > 0, "the recommended app on {platform:?} needs a release page");
                            assert!(url.ends_with("/releases/latest") && file.contains('.'), "{url}");
                        }
                    }
                }
            }
        }
        assert_eq!(
            Store::file_name("https://github.com/a/b/releases/latest/download/Hiddify-MacOS.dmg"),
            "Hiddify-MacOS.dmg"
        );
    }

    /// Surge and Loon take the link as their manuals give the schemes: the whole link
    /// percent-encoded in one parameter, nothing else (neither scheme takes a name); every
    /// other link names the subscription, percent-encoded.
    #[test]
    fn surge_and_loon_import_the_link_their_way() {
        let title = "Tom & Jerry <VPN>";
        let encoded = utf8_percent_encode(title, NON_ALPHANUMERIC).to_string();
        for platform in Platform::ALL {
            for app in platform.apps() {
                let link = app.import.link("https://edge.example/s/TOKEN", title);
                assert_eq!(link.contains(&encoded), app.import.names_the_subscription(), "{link}");
            }
        }
        let link = "https://edge.example/s/TOKEN?format=surge";
        assert_eq!(
            Import::Surge.link(link, "Family & friends"),
            "surge:///install-config?url=https%3A%2F%2Fedge%2Eexample%2Fs%2FTOKEN%3Fformat%3Dsurge"
        );
        assert_eq!(
            Import::Loon.link("https://edge.example/s/TOKEN", "Family"),
            "loon://import?sub=https%3A%2F%2Fedge%2Eexample%2Fs%2FTOKEN"
        );
    }

    /// The page for an iPhone offers Surge and Loon among the other apps, in every language the
    /// page speaks: each with its App Store page and a button, in that language, that imports
    /// the link into it; Hiddify stays the app the page sets up first.
    #[test]
    fn an_iphone_is_offered_surge_and_loon_in_every_language() {
        use super::super::{Viewer, escape, render_at, text::Lang};
        let snapshot = crate::render::tests::sample_snapshot();
        let link = "https://edge.example/s/TOKEN";
        let apps = Platform::Ios.apps();
        assert_eq!(apps[0].import, Import::Hiddify);
        for lang in Lang::ALL {
            let t = lang.text();
            let page = render_at(&snapshot, link, &Default::default(), Viewer { lang, platform: Platform::Ios });
            let others = page.split("<details class=\"apps\">").nth(1).expect("the other apps");
            for (name, store, import) in [
                ("Surge", "https://apps.apple.com/app/id1442620678", Import::Surge),
                ("Loon", "https://apps.apple.com/app/id1373567447", Import::Loon),
            ] {
                assert!(apps.iter().any(|app| app.name == name && app.import == import), "{name}");
                let button = format!(
                    "<a class=\"button\" href=\"{}\">{}</a>",
                    escape(&import.link(link, "")),
                    t.add_to.replace("{app}", name)
                );
                assert!(others.contains(&button), "{lang:?}: {button}");
                assert!(
                    others.contains(&format!(
                        "<li><strong>{name}</strong> <span class=\"stores\"><a href=\"{store}\">App Store</a></span>"
                    )),
                    "{lang:?}: {name}"
                );
            }
        }
        for platform in [Platform::Android, Platform::Windows, Platform::MacOs, Platform::Linux] {
            assert!(
                platform.apps().iter().all(|app| !matches!(app.import, Import::Surge | Import::Loon)),
                "{platform:?}"
            );
        }
    }
}

//! The sing-box profiles that `shared` renders must be accepted by the real sing-box
//! (`sing-box check`), and a profile sing-box would refuse must be refused here too, so the
//! check is known to bite.

use std::path::{Path, PathBuf};
use std::process::Command;

use hearth_tests::{repo_root, sing_box};

fn golden_profiles() -> Vec<PathBuf> {
    let dir = repo_root().join("shared/tests/golden");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    files
}

fn check(config: &Path) -> (bool, String) {
    let out = Command::new(sing_box().unwrap()).arg("check").arg("-c").arg(config).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn every_rendered_sing_box_profile_passes_sing_box_check() {
    let profiles = golden_profiles();
    assert!(profiles.len() >= 4, "expected the golden sing-box profiles, found {profiles:?}");
    for profile in profiles {
        let (ok, stderr) = check(&profile);
        assert!(ok, "sing-box check refused {}:\n{stderr}", profile.display());
    }
}

#[test]
fn sing_box_check_refuses_a_broken_profile() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(&golden_profiles()[0]).unwrap();
    let broken = good.replacen("\"hop_interval\"", "\"hop_intervall\"", 1);
    assert_ne!(good, broken);
    let path = dir.path().join("broken.json");
    std::fs::write(&path, broken).unwrap();
    let (ok, stderr) = check(&path);
    assert!(!ok, "sing-box accepted an unknown field");
    assert!(stderr.contains("unknown field \"hop_intervall\""), "{stderr}");
}

//! The remote API's OpenAPI document (issue 33) passes an external validator:
//! `openapi-spec-validator` (PyPI, installed by `cargo xtask setup`) accepts the
//! committed `docs/src/reference/openapi.json`, which a unit test of `lb` keeps equal
//! to the document the code generates, and refuses a broken copy of it (so the check
//! can fail). Unprivileged.

use std::{path::PathBuf, process::Command};

/// The committed document.
fn document() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/src/reference/openapi.json")
}

/// Runs the validator on `path`: (success, its output).
fn validate(path: &std::path::Path) -> (bool, String) {
    let out = Command::new("python3")
        .args(["-m", "openapi_spec_validator"])
        .arg(path)
        .output()
        .expect("python3 runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !text.contains("No module named"),
        "openapi-spec-validator is not installed: run `cargo xtask setup`\n{text}"
    );
    (out.status.success(), text)
}

#[test]
fn the_committed_openapi_document_passes_openapi_spec_validator() {
    let path = document();
    let (ok, text) = validate(&path);
    assert!(ok, "{}: {text}", path.display());

    // A reference to a schema that does not exist is refused.
    let broken = std::fs::read_to_string(&path)
        .expect("the document")
        .replacen(
            "#/components/schemas/Status\"",
            "#/components/schemas/NoSuch\"",
            1,
        );
    let copy = std::env::temp_dir().join(format!("lb-openapi-{}.json", std::process::id()));
    std::fs::write(&copy, broken).expect("writing the copy");
    let (ok, text) = validate(&copy);
    let _ = std::fs::remove_file(&copy);
    assert!(!ok, "a broken document was accepted: {text}");
}

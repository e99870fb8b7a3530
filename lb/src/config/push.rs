//! A pushed configuration (`PUT /v1/config`, `lb fleet apply`): its top-level keys
//! replace those of the daemon's file, the file's other keys stay ([`merge`]). Keys that
//! belong to one instance and that a push could lock the pusher out with
//! ([`LOCAL_KEYS`]) are refused.

/// Top-level keys a push may not carry: where the instance keeps its socket and state,
/// and its API (a push could cut off the client pushing).
pub const LOCAL_KEYS: [&str; 3] = ["control_socket", "state_dir", "api"];

/// `file` (the daemon's file, TOML) with each top-level key of `pushed` replacing its
/// own; the result starts with a comment saying it was pushed (the file's comments are
/// not kept: TOML is written again from its values).
///
/// # Errors
/// A document that is not TOML (`file` or `pushed`, with the line), or a pushed key of
/// [`LOCAL_KEYS`].
pub fn merge(file: &str, pushed: &str) -> Result<String, String> {
    let mut table: toml::Table = file
        .parse()
        .map_err(|e| format!("the daemon's file is not TOML: {e}"))?;
    let pushed: toml::Table = pushed
        .parse()
        .map_err(|e| format!("the pushed configuration is not TOML: {e}"))?;
    if let Some(key) = pushed.keys().find(|k| LOCAL_KEYS.contains(&k.as_str())) {
        return Err(format!(
            "the pushed configuration sets {key:?}, which belongs to each instance ({} are never pushed)",
            LOCAL_KEYS.join(", ")
        ));
    }
    let keys: Vec<&str> = pushed.keys().map(String::as_str).collect();
    let header = format!(
        "# Written by lb run for a pushed configuration (PUT /v1/config, lb fleet apply),\n\
         # which replaced the keys: {}. The previous file's comments are not kept.\n\n",
        keys.join(", ")
    );
    for (key, value) in pushed {
        table.insert(key, value);
    }
    let body = toml::to_string(&table).map_err(|e| format!("writing the merged file: {e}"))?;
    Ok(header + &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "interface = \"eth0\"\nmtu = 1500\n\n[[vip]]\naddress = \"203.0.113.10\"\nport = 80\nprotocol = \"tcp\"\n";

    #[test]
    fn pushed_keys_replace_the_files_and_the_rest_stays() {
        let pushed =
            "mtu = 9000\n[[vip]]\naddress = \"203.0.113.11\"\nport = 443\nprotocol = \"tcp\"\n";
        let merged: toml::Table = merge(FILE, pushed).expect("merges").parse().expect("TOML");
        assert_eq!(merged["interface"].as_str(), Some("eth0"));
        assert_eq!(merged["mtu"].as_integer(), Some(9000));
        let vips = merged["vip"].as_array().expect("vips");
        assert_eq!(vips.len(), 1);
        assert_eq!(vips[0]["address"].as_str(), Some("203.0.113.11"));
    }

    #[test]
    fn local_keys_and_bad_toml_are_refused_by_name() {
        let err = merge(FILE, "[api]\nenabled = false\n").unwrap_err();
        assert!(err.contains("\"api\""), "{err}");
        let err = merge(FILE, "vip = [").unwrap_err();
        assert!(
            err.starts_with("the pushed configuration is not TOML"),
            "{err}"
        );
        assert!(err.contains("line 1"), "{err}");
    }
}

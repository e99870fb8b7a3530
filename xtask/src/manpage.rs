//! lb.toml(5): the book's configuration reference (docs/src/guide/configuration.md)
//! rendered to roff, so the page and the book say the same. The Markdown it reads is a
//! small subset: ATX headings, paragraphs, fenced code blocks, pipe tables, `-` and
//! numbered lists, and inline code, bold and links (kept as their text).

/// The chapter lb.toml(5) is made from, relative to the workspace root.
pub(crate) const SOURCE: &str = "docs/src/guide/configuration.md";

/// Renders `markdown` as the roff page lb.toml(5) of lb `version`.
pub(crate) fn render(markdown: &str, version: &str) -> String {
    let mut out = String::from("'\\\" t\n");
    out.push_str(&format!(
        ".TH LB.TOML 5 \"\" \"lb {}\" \"File Formats\"\n",
        escape(version)
    ));
    out.push_str(".SH NAME\nlb.toml \\- configuration file of lb run\n");
    out.push_str(".SH SYNOPSIS\n/etc/lb/lb.toml\n");
    let lines: Vec<&str> = markdown.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        i = block(&lines, i, &mut out);
    }
    out.push_str(".SH SEE ALSO\nlb(8), lb-run(8)\n");
    out
}

/// Renders the block that starts at line `i` and returns the line after it.
fn block(lines: &[&str], i: usize, out: &mut String) -> usize {
    let line = lines[i];
    let trimmed = line.trim_start();
    if trimmed.is_empty() || trimmed.starts_with("<!--") {
        return i + 1;
    }
    if let Some((level, text)) = heading(line) {
        match level {
            // The chapter title: the page's NAME says it.
            1 => out.push_str(".SH DESCRIPTION\n"),
            2 => out.push_str(&format!(".SH {}\n", inline(&text.to_uppercase()))),
            _ => out.push_str(&format!(".SS {}\n", inline(text))),
        }
        return i + 1;
    }
    if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
        return code_block(lines, i, out);
    }
    if trimmed.starts_with('|') {
        return table(lines, i, out);
    }
    if list_marker(line).is_some() {
        return list_item(lines, i, out);
    }
    paragraph(lines, i, out)
}

/// An ATX heading's level and text.
fn heading(line: &str) -> Option<(usize, &str)> {
    let level = line.chars().take_while(|c| *c == '#').count();
    let text = line[level..].strip_prefix(' ')?;
    (1..=6)
        .contains(&level)
        .then(|| (level, text.trim().trim_end_matches('#').trim_end()))
}

/// A list item's marker length (`- `, `* `, `1. `), if the line starts one.
fn list_marker(line: &str) -> Option<usize> {
    let trimmed = line.trim_start();
    let indent = line.len() - trimmed.len();
    if trimmed.starts_with("- ") || trimmed.starts_with("* ") {
        return Some(indent + 2);
    }
    let digits = trimmed.chars().take_while(char::is_ascii_digit).count();
    (digits > 0 && trimmed[digits..].starts_with(". ")).then_some(indent + digits + 2)
}

/// Whether the line ends a paragraph or a list item's text.
fn ends_text(line: &str) -> bool {
    let trimmed = line.trim_start();
    trimmed.is_empty()
        || heading(line).is_some()
        || trimmed.starts_with("```")
        || trimmed.starts_with("~~~")
        || trimmed.starts_with('|')
        || list_marker(line).is_some()
}

fn paragraph(lines: &[&str], i: usize, out: &mut String) -> usize {
    out.push_str(".PP\n");
    text_line(lines[i].trim(), out);
    continuation(lines, i + 1, out)
}

/// The text lines that continue a paragraph or list item from line `i`; returns the
/// line after them.
fn continuation(lines: &[&str], mut i: usize, out: &mut String) -> usize {
    while i < lines.len() && !ends_text(lines[i]) {
        text_line(lines[i].trim(), out);
        i += 1;
    }
    i
}

fn list_item(lines: &[&str], i: usize, out: &mut String) -> usize {
    let line = lines[i];
    let marker = list_marker(line).unwrap_or(0);
    let bullet = line.trim_start().starts_with(['-', '*']);
    let label = if bullet {
        "\\(bu".to_owned()
    } else {
        line.trim_start()
            .split_once(' ')
            .map_or("", |(n, _)| n)
            .to_owned()
    };
    out.push_str(&format!(".IP {label} 4\n"));
    text_line(line[marker.min(line.len())..].trim(), out);
    continuation(lines, i + 1, out)
}

fn code_block(lines: &[&str], i: usize, out: &mut String) -> usize {
    let fence = &lines[i].trim_start()[..3];
    out.push_str(".PP\n.RS 4\n.nf\n");
    let mut i = i + 1;
    while i < lines.len() && !lines[i].trim_start().starts_with(fence) {
        out.push_str(&protect(&escape(lines[i])));
        out.push('\n');
        i += 1;
    }
    out.push_str(".fi\n.RE\n");
    i + 1
}

/// A pipe table as a tbl(1) table, every cell a text block so that long cells wrap.
fn table(lines: &[&str], i: usize, out: &mut String) -> usize {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut i = i;
    while i < lines.len() && lines[i].trim_start().starts_with('|') {
        let cells: Vec<String> = lines[i]
            .trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_owned())
            .collect();
        let rule = cells
            .iter()
            .all(|c| !c.is_empty() && c.chars().all(|ch| matches!(ch, '-' | ':')));
        if !rule {
            rows.push(cells);
        }
        i += 1;
    }
    let columns = rows.iter().map(Vec::len).max().unwrap_or(1);
    out.push_str(".PP\n.TS\nallbox;\n");
    out.push_str(&vec!["lb"; columns].join(" "));
    out.push('\n');
    out.push_str(&vec!["lx"; columns].join(" "));
    out.push_str(".\n");
    for row in &rows {
        let cells: Vec<String> = (0..columns)
            .map(|c| {
                let text = row.get(c).map_or("", String::as_str);
                format!("T{{\n{}\nT}}", protect(&inline(text)))
            })
            .collect();
        out.push_str(&cells.join("\t"));
        out.push('\n');
    }
    out.push_str(".TE\n");
    i
}

/// Writes one line of running text.
fn text_line(text: &str, out: &mut String) {
    out.push_str(&protect(&inline(text)));
    out.push('\n');
}

/// Inline Markdown as roff: code and bold in bold, links as their text, escapes.
fn inline(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c == '`'
            && let Some(end) = rest[1..].find('`')
        {
            out.push_str(&format!("\\fB{}\\fR", escape(&rest[1..=end])));
            rest = &rest[end + 2..];
            continue;
        }
        if let Some(after) = rest.strip_prefix("**")
            && let Some(end) = after.find("**")
        {
            out.push_str(&format!("\\fB{}\\fR", inline(&after[..end])));
            rest = &after[end + 2..];
            continue;
        }
        if c == '['
            && let Some((label, after)) = link(rest)
        {
            out.push_str(&inline(label));
            rest = after;
            continue;
        }
        out.push_str(&escape(&c.to_string()));
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// A link at the start of `text`: its label and the text after it.
fn link(text: &str) -> Option<(&str, &str)> {
    let mid = text.find("](")?;
    let close = text[mid..].find(')')? + mid;
    Some((&text[1..mid], &text[close + 1..]))
}

/// Escapes roff's backslash and the hyphen-minus (so `--config` stays copyable).
fn escape(text: &str) -> String {
    text.replace('\\', "\\e").replace('-', "\\-")
}

/// Keeps a line that starts with `.` or `'` from being read as a request.
fn protect(line: &str) -> String {
    if line.starts_with('.') || line.starts_with('\'') {
        format!("\\&{line}")
    } else {
        line.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headings_paragraphs_and_inline_marks() {
        let page = render(
            "# Title\n\nSome `--config FILE` and **bold** with [a link](x.md#y).\nnext line\n\n## Changes while traffic flows\n### Sub\n",
            "0.1.0",
        );
        assert!(
            page.starts_with("'\\\" t\n.TH LB.TOML 5 \"\" \"lb 0.1.0\""),
            "{page}"
        );
        assert!(page.contains(".SH NAME\nlb.toml \\- configuration file of lb run\n"));
        assert!(page.contains(".SH DESCRIPTION\n.PP\n"));
        assert!(
            page.contains(
                "Some \\fB\\-\\-config FILE\\fR and \\fBbold\\fR with a link.\nnext line\n"
            )
        );
        assert!(page.contains(".SH CHANGES WHILE TRAFFIC FLOWS\n.SS Sub\n"));
    }

    #[test]
    fn code_blocks_keep_their_lines() {
        let page = render(
            "```toml\ninterface = \"eth0\"\n.hidden\n[encap]\n```\n",
            "1",
        );
        assert!(
            page.contains(".nf\ninterface = \"eth0\"\n\\&.hidden\n[encap]\n.fi\n"),
            "{page}"
        );
    }

    #[test]
    fn lists_with_continuation_lines() {
        let page = render(
            "- **Reload** on `SIGHUP`\n  and more\n- second\n\n1. first\n",
            "1",
        );
        assert!(
            page.contains(
                ".IP \\(bu 4\n\\fBReload\\fR on \\fBSIGHUP\\fR\nand more\n.IP \\(bu 4\nsecond\n"
            ),
            "{page}"
        );
        assert!(page.contains(".IP 1. 4\nfirst\n"), "{page}");
    }

    #[test]
    fn tables_become_tbl_text_blocks() {
        let page = render("| key | default |\n|---|---:|\n| `mtu` | 1500 |\n", "1");
        assert!(page.contains(".TS\nallbox;\nlb lb\nlx lx.\n"), "{page}");
        assert!(
            page.contains("T{\n\\fBmtu\\fR\nT}\tT{\n1500\nT}\n.TE\n"),
            "{page}"
        );
    }

    #[test]
    fn the_configuration_chapter_renders() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let chapter = std::fs::read_to_string(root.join(SOURCE)).unwrap();
        let page = render(&chapter, "0.1.0");
        assert!(
            page.contains(".SH CHANGES WHILE TRAFFIC FLOWS"),
            "{page:.2000}"
        );
        assert!(page.contains("interface = \"eth0\""));
        assert!(!page.contains("]("), "a link left in the page");
    }
}

use super::*;

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p
}

#[test]
fn cut_points_start_lines_and_skip_quoted_newlines() {
    let dir = tempfile::tempdir().expect("tmp");
    let text = "a,b\n1,\"x\ny\"\n2,z\n3,w\n4,v\n";
    let p = write(dir.path(), "q.csv", text);
    let cuts = cut_points(&p, 5, Some(b'"')).expect("cuts");
    // Every cut starts a record, and none falls inside the quoted value.
    for &(at, line) in &cuts {
        let at = at as usize;
        assert!(at == 0 || text.as_bytes()[at - 1] == b'\n', "{cuts:?}");
        assert_eq!(line as usize, text[..at].matches('\n').count() + 1);
        assert_ne!(at, text.find("y\"").expect("y"));
    }
    assert!(cuts.len() >= 3, "{cuts:?}");
    let small = cut_points(&p, 1 << 20, Some(b'"')).expect("cuts");
    assert_eq!(small, vec![(0, 1)]);
}

#[test]
fn numbers_after_prefixes() {
    let m = "Error while parsing value 'x' as type 'Int64' for column 2 at line 17. Row data: 'x'";
    assert_eq!(find_number_after(m, "line "), Some(17));
    assert_eq!(find_number_after(m, "for column "), Some(2));
    assert_eq!(find_number_after("nothing", "line "), None);
}

//! The gate's JUnit XML export, valid against the Jenkins xunit plugin's `junit-10.xsd`
//! (`testsuites` > `testsuite` > `properties` and one `testcase` per check; the test
//! `reports/tests/junit_schema.rs` validates it with `xmllint`). The suite stands for the
//! candidate run: its `time` is that run's wall-clock duration (provenance start to finish, in
//! seconds with three decimals, the schema's `SUREFIRE_TIME`). A regression is a `failure` and
//! an error an `error`, each with the one-line message as attribute and a body naming the
//! figures behind it (baseline, candidate, change, p-value) and the full explanation.
//!
//! Written through `quick_xml`'s writer, which escapes `& < > " '` in attribute values and
//! text, and writes a tab or line feed inside an attribute value as `&#9;` / `&#10;` (so a
//! reader's attribute-value normalization keeps them). Control characters other than tab and
//! newline, which XML 1.0 does not allow, become spaces first.

use quick_xml::Writer;
use quick_xml::events::{BytesDecl, BytesEnd, BytesStart, BytesText, Event};

use super::{CheckStatus, GateCheck, GateOutcome};
use crate::render::{RenderContext, num, one_line, utc};

/// `s` without the control characters XML 1.0 forbids (each becomes a space).
fn xml_chars(s: &str) -> String {
    s.chars()
        .map(|c| {
            if (c as u32) < 0x20 && c != '\t' && c != '\n' {
                ' '
            } else {
                c
            }
        })
        .collect()
}

/// An element start with `attrs` (values cleaned by [`xml_chars`], escaped by the writer).
fn element<'a>(name: &'a str, attrs: &[(&str, &str)]) -> BytesStart<'a> {
    let mut e = BytesStart::new(name);
    for (k, v) in attrs {
        e.push_attribute((*k, xml_chars(v).as_str()));
    }
    e
}

impl GateOutcome {
    /// JUnit XML: one test case per check; regressions are failures, errors are errors.
    pub fn to_junit(&self, ctx: &RenderContext) -> String {
        let mut w = Writer::new_with_indent(Vec::new(), b' ', 2);
        // Writing into a Vec cannot fail.
        let _ = self.write_junit(&mut w, ctx);
        let mut s = String::from_utf8_lossy(&w.into_inner()).into_owned();
        s.push('\n');
        s
    }

    fn write_junit(&self, w: &mut Writer<Vec<u8>>, ctx: &RenderContext) -> std::io::Result<()> {
        let count = |s: CheckStatus| self.checks.iter().filter(|c| c.status == s).count();
        let errors = (count(CheckStatus::Error) + usize::from(self.error.is_some())).to_string();
        let failures = count(CheckStatus::Regression).to_string();
        let skipped = count(CheckStatus::Skipped).to_string();
        let tests = (self.checks.len() + usize::from(self.error.is_some())).to_string();
        let time = self.candidate_seconds();
        // `testsuites` has no `skipped` attribute in the schema; `testsuite` has.
        let mut suites = vec![
            ("name", "pocketperf-gate"),
            ("tests", tests.as_str()),
            ("failures", failures.as_str()),
            ("errors", errors.as_str()),
        ];
        if let Some(t) = &time {
            suites.push(("time", t.as_str()));
        }
        let stamp = utc(&ctx.rendered_utc);
        let mut suite = suites.clone();
        suite.push(("skipped", skipped.as_str()));
        suite.push(("timestamp", stamp.as_str()));
        w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
        w.write_event(Event::Start(element("testsuites", &suites)))?;
        w.write_event(Event::Start(element("testsuite", &suite)))?;
        w.write_event(Event::Start(BytesStart::new("properties")))?;
        for (k, v) in self.provenance(ctx) {
            let v = one_line(&v);
            w.write_event(Event::Empty(element(
                "property",
                &[("name", k.as_str()), ("value", v.as_str())],
            )))?;
        }
        w.write_event(Event::End(BytesEnd::new("properties")))?;
        if let Some(e) = &self.error {
            let msg = one_line(e);
            let case = [("classname", "gate"), ("name", "load")];
            w.write_event(Event::Start(element("testcase", &case)))?;
            let attrs = [("message", msg.as_str()), ("type", "error")];
            w.write_event(Event::Start(element("error", &attrs)))?;
            w.write_event(Event::Text(BytesText::new(&xml_chars(e))))?;
            w.write_event(Event::End(BytesEnd::new("error")))?;
            w.write_event(Event::End(BytesEnd::new("testcase")))?;
        }
        for c in &self.checks {
            let class = format!("gate.{}", c.name.split('.').next().unwrap_or("gate"));
            let case = [("classname", class.as_str()), ("name", c.name.as_str())];
            w.write_event(Event::Start(element("testcase", &case)))?;
            let msg = one_line(&c.detail);
            let (tag, attrs): (&str, Vec<(&str, &str)>) = match c.status {
                CheckStatus::Pass => {
                    w.write_event(Event::Start(BytesStart::new("system-out")))?;
                    w.write_event(Event::Text(BytesText::new(&xml_chars(&msg))))?;
                    w.write_event(Event::End(BytesEnd::new("system-out")))?;
                    w.write_event(Event::End(BytesEnd::new("testcase")))?;
                    continue;
                }
                CheckStatus::Regression => (
                    "failure",
                    vec![("message", msg.as_str()), ("type", "regression")],
                ),
                CheckStatus::Skipped => ("skipped", vec![("message", msg.as_str())]),
                CheckStatus::Error => ("error", vec![("message", msg.as_str()), ("type", "error")]),
            };
            if c.status == CheckStatus::Skipped {
                w.write_event(Event::Empty(element(tag, &attrs)))?;
            } else {
                w.write_event(Event::Start(element(tag, &attrs)))?;
                w.write_event(Event::Text(BytesText::new(&xml_chars(&body(c)))))?;
                w.write_event(Event::End(BytesEnd::new(tag)))?;
            }
            w.write_event(Event::End(BytesEnd::new("testcase")))?;
        }
        w.write_event(Event::End(BytesEnd::new("testsuite")))?;
        w.write_event(Event::End(BytesEnd::new("testsuites")))?;
        Ok(())
    }

    /// The candidate run's wall-clock duration as `SUREFIRE_TIME` (seconds, three decimals),
    /// when its provenance was read and ends after it starts.
    fn candidate_seconds(&self) -> Option<String> {
        let m = self.candidate_meta.as_ref()?;
        let ms = (m.finished_utc - m.started_utc).num_milliseconds();
        (ms >= 0).then(|| format!("{}.{:03}", ms / 1000, ms % 1000))
    }
}

/// The body of a check's `failure` or `error` element: the figures, then the explanation.
fn body(c: &GateCheck) -> String {
    let mut lines = Vec::new();
    let figure = |label: &str, v: Option<f64>| v.map(|v| format!("{label}: {}", num(v)));
    lines.extend(figure("baseline", c.baseline));
    lines.extend(figure("candidate", c.candidate));
    if let Some(ch) = c.change {
        lines.push(format!("change: {:+.2}%", ch * 100.0));
    }
    if let Some(p) = c.p_value {
        lines.push(format!("p-value: {p:.3e}"));
    }
    lines.push(c.detail.clone());
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use quick_xml::{Reader, XmlVersion};

    /// Every attribute value of element `tag`, unescaped by quick-xml's reader.
    fn attrs_of(xml: &str, tag: &str) -> Vec<Vec<(String, String)>> {
        let mut r = Reader::from_str(xml);
        let mut out = Vec::new();
        loop {
            match r.read_event().expect("well-formed XML") {
                Event::Start(e) | Event::Empty(e) if e.name().into_inner() == tag => {
                    out.push(
                        e.attributes()
                            .map(|a| {
                                let a = a.expect("attribute");
                                let v = a.normalized_value(XmlVersion::Implicit1_0);
                                (
                                    a.key.into_inner().to_string(),
                                    v.expect("value").into_owned(),
                                )
                            })
                            .collect(),
                    );
                }
                Event::Eof => break,
                _ => {}
            }
        }
        out
    }

    #[test]
    fn junit_reads_back_as_the_text_it_was_given() {
        let detail = "p < 0.05 & \"median\" up 'a lot'\u{1}\u{7}\ttab\r\nnext";
        let mut o = GateOutcome::failed("base", "cand", "unused");
        o.error = None;
        o.checks = vec![GateCheck {
            name: "performance.tpot_ms".into(),
            status: CheckStatus::Regression,
            baseline: None,
            candidate: None,
            change: None,
            p_value: None,
            detail: detail.into(),
        }];
        let xml = o.to_junit(&RenderContext {
            rendered_utc: chrono::DateTime::from_timestamp(0, 0).expect("epoch"),
        });
        assert!(xml.ends_with("</testsuites>\n"), "{xml}");
        let failures = attrs_of(&xml, "failure");
        assert_eq!(failures.len(), 1, "{xml}");
        // Line breaks become spaces (one line per message), other control characters too; the
        // tab is written as `&#9;`, so XML's attribute-value normalization keeps it; the five
        // special characters come back unescaped.
        let want = "p < 0.05 & \"median\" up 'a lot'  \ttab  next";
        assert!(xml.contains("&apos;a lot&apos;  &#9;tab  next"), "{xml}");
        assert_eq!(failures[0][0], ("message".to_string(), want.to_string()));
        assert_eq!(
            failures[0][1],
            ("type".to_string(), "regression".to_string())
        );
        let cases = attrs_of(&xml, "testcase");
        assert_eq!(cases[0][0].1, "gate.performance");
        let suites = attrs_of(&xml, "testsuite");
        assert!(suites[0].contains(&("failures".to_string(), "1".to_string())));
        assert!(suites[0].contains(&("timestamp".to_string(), "1970-01-01T00:00:00Z".to_string())));
    }
}

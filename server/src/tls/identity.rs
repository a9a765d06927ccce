//! The names a verified client certificate maps to (`verify_and_map`), in nats-server's order:
//! the SAN e-mail addresses, the SAN DNS names, the SAN URIs, then the subject as an RFC 2253
//! distinguished name the way Go prints it (`CN=alice,OU=dev,O=Acme,C=US`: last RDN first,
//! attribute types Go knows by their short name, others as `<oid>=#<hex DER>`).

use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
use x509_parser::x509::AttributeTypeAndValue;

/// Attribute types Go's `pkix.Name.String` prints by name.
const SHORT_NAMES: [(&str, &str); 9] = [
    ("2.5.4.6", "C"),
    ("2.5.4.10", "O"),
    ("2.5.4.11", "OU"),
    ("2.5.4.3", "CN"),
    ("2.5.4.5", "SERIALNUMBER"),
    ("2.5.4.7", "L"),
    ("2.5.4.8", "ST"),
    ("2.5.4.9", "STREET"),
    ("2.5.4.17", "POSTALCODE"),
];

/// The candidate user names of the DER certificate `der`, most specific first; empty when the
/// certificate cannot be parsed.
pub fn cert_identities(der: &[u8]) -> Vec<String> {
    let Ok((_, cert)) = X509Certificate::from_der(der) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        let names = &san.value.general_names;
        // Kinds in nats-server's order: e-mail (1), DNS (2), URI (3).
        let kind = |g: &GeneralName<'_>| match g {
            GeneralName::RFC822Name(s) => Some((1, s.to_string())),
            GeneralName::DNSName(s) => Some((2, s.to_string())),
            GeneralName::URI(s) => Some((3, s.to_string())),
            _ => None,
        };
        let mut sans: Vec<(u8, String)> = names.iter().filter_map(kind).collect();
        sans.sort_by_key(|(k, _)| *k);
        out.extend(sans.into_iter().map(|(_, s)| s));
    }
    let rdns: Vec<String> = cert
        .subject()
        .iter_rdn()
        .map(|rdn| rdn.iter().map(attribute).collect::<Vec<_>>().join("+"))
        .collect();
    if !rdns.is_empty() {
        out.push(rdns.iter().rev().cloned().collect::<Vec<_>>().join(","));
    }
    out
}

/// One `type=value` of a distinguished name.
fn attribute(a: &AttributeTypeAndValue<'_>) -> String {
    let oid = a.attr_type().to_id_string();
    match (SHORT_NAMES.iter().find(|(o, _)| *o == oid), a.as_str()) {
        (Some((_, name)), Ok(value)) => format!("{name}={}", escape(value)),
        _ => {
            let value = a.attr_value();
            let mut der = vec![u8::try_from(value.tag().0).unwrap_or(0)];
            push_der_len(&mut der, value.data.len());
            der.extend_from_slice(value.data);
            let hex: String = der.iter().map(|b| format!("{b:02x}")).collect();
            format!("{oid}=#{hex}")
        }
    }
}

/// A DER length.
fn push_der_len(out: &mut Vec<u8>, len: usize) {
    if len < 0x80 {
        out.push(len as u8);
        return;
    }
    let bytes: Vec<u8> = len
        .to_be_bytes()
        .into_iter()
        .skip_while(|b| *b == 0)
        .collect();
    out.push(0x80 | bytes.len() as u8);
    out.extend(bytes);
}

/// RFC 2253 escaping as Go does it: `,+"\<>;` anywhere, `#` or a space first, a space last.
fn escape(s: &str) -> String {
    let n = s.chars().count();
    let mut out = String::with_capacity(s.len());
    for (i, c) in s.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == ' ' || c == '#'))
            || (i + 1 == n && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn san_names_come_before_the_subject_in_go_order() {
        let mut params =
            rcgen::CertificateParams::new(vec!["svc.example.com".to_string()]).expect("params");
        params.subject_alt_names.insert(
            0,
            rcgen::SanType::Rfc822Name("alice@example.com".try_into().expect("email")),
        );
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CountryName, "US");
        dn.push(rcgen::DnType::OrganizationName, "Acme, Inc");
        dn.push(rcgen::DnType::CommonName, "alice");
        params.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("cert");
        assert_eq!(
            cert_identities(cert.der()),
            vec![
                "alice@example.com".to_string(),
                "svc.example.com".to_string(),
                "CN=alice,O=Acme\\, Inc,C=US".to_string(),
            ]
        );
    }

    #[test]
    fn garbage_has_no_identity() {
        assert!(cert_identities(b"not a certificate").is_empty());
    }

    #[test]
    fn escaping_follows_rfc2253() {
        assert_eq!(escape("#a b "), "\\#a b\\ ");
        assert_eq!(escape("a+b<c>"), "a\\+b\\<c\\>");
    }
}

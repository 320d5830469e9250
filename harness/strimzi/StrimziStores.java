// PKCS#12 stores as Strimzi writes them into its Secrets (ca.p12, user.p12), with Java's own KeyStore API
// and the same entry types and protection as Strimzi's OpenSslCertIssuer: a truststore of one
// TrustedCertificateEntry, and a keystore of one PrivateKeyEntry protected with PBEWithHmacSHA256AndAES_128.
//
//   java StrimziStores.java truststore <cert.pem> <alias> <out.p12> <password>
//   java StrimziStores.java keystore <key.pem (PKCS#8)> <cert.pem> <alias> <out.p12> <password>

import java.io.ByteArrayInputStream;
import java.io.FileOutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.SecureRandom;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.Base64;
import javax.crypto.spec.PBEParameterSpec;

public class StrimziStores {
    static Certificate cert(String path) throws Exception {
        byte[] pem = Files.readAllBytes(Path.of(path));
        return CertificateFactory.getInstance("X.509").generateCertificate(new ByteArrayInputStream(pem));
    }

    static PrivateKey key(String path) throws Exception {
        String pem = Files.readString(Path.of(path), StandardCharsets.US_ASCII)
            .replace("-----BEGIN PRIVATE KEY-----", "")
            .replace("-----END PRIVATE KEY-----", "")
            .replaceAll("\\s", "");
        PKCS8EncodedKeySpec spec = new PKCS8EncodedKeySpec(Base64.getDecoder().decode(pem));
        for (String algorithm : new String[] {"RSA", "EC"}) {
            try {
                return KeyFactory.getInstance(algorithm).generatePrivate(spec);
            } catch (java.security.spec.InvalidKeySpecException e) {
                // try the next algorithm
            }
        }
        throw new IllegalArgumentException("not an RSA or EC PKCS#8 key: " + path);
    }

    public static void main(String[] args) throws Exception {
        KeyStore store = KeyStore.getInstance("PKCS12");
        store.load(null, null);
        String out;
        String password;
        if (args[0].equals("truststore")) {
            store.setEntry(args[2], new KeyStore.TrustedCertificateEntry(cert(args[1])), null);
            out = args[3];
            password = args[4];
        } else {
            byte[] salt = new byte[20];
            new SecureRandom().nextBytes(salt);
            store.setEntry(args[3], new KeyStore.PrivateKeyEntry(key(args[1]), new Certificate[] {cert(args[2])}),
                new KeyStore.PasswordProtection(password(args[5]), "PBEWithHmacSHA256AndAES_128",
                    new PBEParameterSpec(salt, 2048)));
            out = args[4];
            password = args[5];
        }
        try (FileOutputStream os = new FileOutputStream(out)) {
            store.store(os, password.toCharArray());
        }
    }

    static char[] password(String text) {
        return text.toCharArray();
    }
}

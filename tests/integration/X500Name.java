// Prints, for each PEM certificate file given, the name a Kafka broker gives its
// holder under the default ssl.principal.mapping.rules: the subject as
// X500Principal.getName() renders it (what DefaultKafkaPrincipalBuilder uses).
// Run as a single-file program: java X500Name.java a.pem b.pem
import java.io.FileInputStream;
import java.nio.charset.StandardCharsets;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;

public class X500Name {
    public static void main(String[] args) throws Exception {
        CertificateFactory factory = CertificateFactory.getInstance("X.509");
        for (String path : args) {
            try (FileInputStream in = new FileInputStream(path)) {
                X509Certificate cert = (X509Certificate) factory.generateCertificate(in);
                byte[] name = cert.getSubjectX500Principal().getName().getBytes(StandardCharsets.UTF_8);
                System.out.write(name);
                System.out.write('\n');
            }
        }
        System.out.flush();
    }
}

// What Strimzi's User Operator decides about a name, with the same Java calls its code makes:
// for each line "pattern<TAB>name" of stdin, prints "<matches><TAB><decoded>" where matches is
// Pattern.compile(pattern).matcher(name).matches() (QuotasOperator.getAllUsers), or "error" when
// the pattern does not compile, and decoded is KafkaUserModel.decodeUsername(name): the CN values
// of an LDAP name containing "CN=" (javax.naming.ldap.LdapName), joined, or "!" when it is not one.
// Run as a single-file program: java StrimziNames.java < cases.tsv
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;
import java.util.stream.Collectors;
import javax.naming.InvalidNameException;
import javax.naming.ldap.LdapName;

public class StrimziNames {
    static String decode(String username) {
        if (!username.contains("CN=")) {
            return username;
        }
        try {
            return new LdapName(username).getRdns().stream()
                .filter(rdn -> rdn.getType().equalsIgnoreCase("cn"))
                .map(rdn -> rdn.getValue().toString()).collect(Collectors.joining());
        } catch (InvalidNameException e) {
            return "!";
        }
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        StringBuilder out = new StringBuilder();
        String line;
        while ((line = in.readLine()) != null) {
            String[] parts = line.split("\t", 2);
            String matches;
            try {
                matches = String.valueOf(Pattern.compile(parts[0]).matcher(parts[1]).matches());
            } catch (PatternSyntaxException e) {
                matches = "error";
            }
            out.append(matches).append('\t').append(decode(parts[1])).append('\n');
        }
        System.out.write(out.toString().getBytes(StandardCharsets.UTF_8));
        System.out.flush();
    }
}

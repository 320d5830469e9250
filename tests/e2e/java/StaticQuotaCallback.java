// A client quota callback that, like Strimzi's quota plugin, puts every client
// in one quota group and ignores the users/clients entity quotas: what kquota
// must detect and report instead of "Applied". Compiled by the e2e test against
// the broker's own kafka-clients jar.
package kquota.test;

import java.util.Collections;
import java.util.Map;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.server.quota.ClientQuotaCallback;
import org.apache.kafka.server.quota.ClientQuotaEntity;
import org.apache.kafka.server.quota.ClientQuotaType;

public class StaticQuotaCallback implements ClientQuotaCallback {
    private static final Map<String, String> TAGS = Collections.singletonMap("group", "everyone");

    @Override
    public void configure(Map<String, ?> configs) {}

    @Override
    public Map<String, String> quotaMetricTags(ClientQuotaType type, KafkaPrincipal principal, String clientId) {
        return TAGS;
    }

    @Override
    public Double quotaLimit(ClientQuotaType type, Map<String, String> metricTags) {
        return null; // unlimited, whatever the entity configs say
    }

    @Override
    public void updateQuota(ClientQuotaType type, ClientQuotaEntity entity, double newValue) {}

    @Override
    public void removeQuota(ClientQuotaType type, ClientQuotaEntity entity) {}

    @Override
    public boolean quotaResetRequired(ClientQuotaType type) {
        return false;
    }

    @Override
    public boolean updateClusterMetadata(Cluster cluster) {
        return false;
    }

    @Override
    public void close() {}
}

-- Model tokens spent per UTC day (contract §12's budgets): one row per
-- day, scope (`session`, `tenant`, `node`) and key, added to as model
-- calls answer.
CREATE TABLE token_spend (
    day BIGINT NOT NULL,
    scope TEXT NOT NULL,
    spend_key TEXT NOT NULL,
    tokens BIGINT NOT NULL,
    PRIMARY KEY (day, scope, spend_key)
);

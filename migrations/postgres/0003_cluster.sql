-- The nodes of a deployment, so any node can reach the one that runs a
-- session: a chat that arrives elsewhere is handed to the owner.
CREATE TABLE nodes (
    node_id      TEXT PRIMARY KEY NOT NULL,
    -- Where other nodes reach this one (QUESTD_NODE_URL).
    url          TEXT NOT NULL,
    -- When the node last started and said where it is.
    announced_at TIMESTAMPTZ NOT NULL
);

-- The secret nodes of one database show each other when handing over
-- work. Made by the first node; anyone who can read it can write the
-- database anyway.
CREATE TABLE cluster_secret (
    id     SMALLINT PRIMARY KEY NOT NULL CHECK (id = 1),
    secret TEXT NOT NULL
);

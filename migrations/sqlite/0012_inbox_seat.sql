-- The seat that spoke a stored chat (party play): its turn acts for that
-- seat's character. Rows stored before parties have none and read as the
-- host seat, the only one there was.
ALTER TABLE inbox ADD COLUMN seat_id TEXT;

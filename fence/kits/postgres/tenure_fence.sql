-- Tenure fencing kit for PostgreSQL: the store's half of fencing, applied once.
--
-- A holder whose lease has passed to another (a GC pause, a partition) can
-- still send writes. This kit makes PostgreSQL refuse them: the application
-- calls tenure_fence(lease, token) first in every writing transaction; the
-- call advances the lease's highest token and holds its row lock until
-- commit, so the writers of one lease are ordered by token, and a token
-- lower than the highest refuses the whole transaction (SQLSTATE TF409).
-- The trigger function tenure_fenced() catches a write path that forgot the
-- call. The token must come from a fence proof the application verified
-- first (fence/<lang>, docs/fencing.md): the kit compares tokens, it does not
-- check signatures. See fence/kits/README.md.
--
-- Plain SQL and PL/pgSQL, no extension; PostgreSQL 11 or later (tested on 15). Idempotent:
-- applying it again changes nothing. Objects go in the current schema (the
-- first of search_path when applied); every function keeps that search_path
-- (SET search_path FROM CURRENT), so callers with another search_path still
-- reach the table.
--
--   psql -v ON_ERROR_STOP=1 --single-transaction -f tenure_fence.sql
--
-- SQLSTATEs raised (class TF, custom):
--   TF409  FENCE_STALE          the token is lower than the lease's highest
--   TF400  FENCE_INVALID_TOKEN  the token is not a whole number in 1..2^64-1
--          FENCE_INVALID_NAME   the lease name is not 1 to 255 bytes
--   TF428  FENCE_MISSING        a fenced table was written in a transaction
--                               not fenced for its lease

-- The highest fencing token accepted per lease name. One row per lease,
-- created by its first tenure_fence call. numeric(20,0) holds the whole
-- unsigned 64-bit range of Tenure's tokens, which bigint does not.
CREATE TABLE IF NOT EXISTS tenure_fence (
    lease_name    text          NOT NULL,
    highest_token numeric(20,0) NOT NULL,
    updated_at    timestamptz   NOT NULL DEFAULT now(),
    CONSTRAINT tenure_fence_pkey PRIMARY KEY (lease_name),
    CONSTRAINT tenure_fence_lease_name_length
        CHECK (octet_length(lease_name) BETWEEN 1 AND 255),
    CONSTRAINT tenure_fence_token_range
        CHECK (highest_token BETWEEN 1 AND 18446744073709551615)
);

COMMENT ON TABLE tenure_fence IS
    'Tenure fencing: the highest fencing token accepted per lease name. Written only by tenure_fence().';

-- The token this transaction is fenced with for a lease, or NULL when it has
-- not called tenure_fence for it. For triggers and checks of your own (the
-- trigger function below uses it). The record is a transaction-local setting
-- (tenure.fence, a JSON object from lease name to token), so it ends with
-- the transaction and is undone with a rolled-back savepoint.
CREATE OR REPLACE FUNCTION tenure_fence_token(lease_name text)
    RETURNS numeric
    LANGUAGE sql
    STABLE
    SET search_path FROM CURRENT
AS $fn$
    SELECT (nullif(current_setting('tenure.fence', true), '')::jsonb ->> $1)::numeric
$fn$;

COMMENT ON FUNCTION tenure_fence_token(text) IS
    'Tenure fencing: the token this transaction is fenced with for the lease, or NULL.';

-- Fences the current transaction with a lease's token. Call it first in the
-- writing transaction, with the token of a fence proof already verified for
-- this lease name:
--
--   BEGIN;
--   SELECT tenure_fence('orders', 9);
--   UPDATE orders SET ... ;
--   COMMIT;
--
-- It inserts the lease's row or advances its highest token (an equal token
-- is accepted: the same holder writing again). The row stays locked until
-- the transaction ends, so a writer with another token for the lease waits,
-- then re-reads the row: a lower token than the one just committed fails
-- with TF409 and its transaction must roll back. Under REPEATABLE READ or
-- SERIALIZABLE the waiting writer may fail with 40001 instead; retried, it
-- gets TF409. Fence several leases in one transaction in a fixed order (by
-- name) so two transactions cannot deadlock on each other's rows.
CREATE OR REPLACE FUNCTION tenure_fence(lease_name text, token numeric)
    RETURNS void
    LANGUAGE plpgsql
    VOLATILE
    SET search_path FROM CURRENT
AS $fn$
DECLARE
    -- Copies under names no column has, so no statement below is ambiguous.
    lease   constant text := $1;
    tok     numeric := $2;
    highest numeric;
    fenced  jsonb;
BEGIN
    IF lease IS NULL OR octet_length(lease) NOT BETWEEN 1 AND 255 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'TF400',
            MESSAGE = format('FENCE_INVALID_NAME: lease name %s is not 1 to 255 bytes',
                             coalesce(left(to_json(lease)::text, 300), 'NULL')),
            HINT = 'Pass the lease name the fence proof was verified for.';
    END IF;
    -- NaN and infinity fail BETWEEN too.
    IF tok IS NULL OR NOT (tok BETWEEN 1 AND 18446744073709551615) OR tok <> trunc(tok) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'TF400',
            MESSAGE = format('FENCE_INVALID_TOKEN: fencing token %s for lease %s is not a whole number from 1 to 18446744073709551615',
                             coalesce(left(tok::text, 40), 'NULL'), to_json(lease)::text),
            HINT = 'Pass the fencing token of the verified fence proof, as a number or a decimal string cast to numeric.';
    END IF;
    tok := tok::numeric(20,0);  -- 9.0 becomes 9

    -- The conflict target is named by constraint: the parameter lease_name
    -- would make ON CONFLICT (lease_name) ambiguous. DO UPDATE locks the row
    -- even when its WHERE is false.
    INSERT INTO tenure_fence AS f (lease_name, highest_token, updated_at)
        VALUES (lease, tok, clock_timestamp())
        ON CONFLICT ON CONSTRAINT tenure_fence_pkey DO UPDATE
            SET highest_token = excluded.highest_token,
                updated_at = excluded.updated_at
            WHERE f.highest_token <= excluded.highest_token;
    IF NOT FOUND THEN
        SELECT f.highest_token INTO highest FROM tenure_fence AS f WHERE f.lease_name = lease;
        RAISE EXCEPTION USING
            ERRCODE = 'TF409',
            MESSAGE = format('FENCE_STALE: fencing token %s is older than %s, the highest seen for lease %s; the lease has passed to another holder',
                             tok, highest, to_json(lease)::text),
            HINT = 'Roll back and stop acting for this lease: acquire it again before writing.';
    END IF;

    fenced := coalesce(nullif(current_setting('tenure.fence', true), '')::jsonb, '{}'::jsonb);
    PERFORM set_config('tenure.fence',
                       (fenced || jsonb_build_object(lease, tok::text))::text,
                       true);
END
$fn$;

COMMENT ON FUNCTION tenure_fence(text, numeric) IS
    'Tenure fencing: call first in a writing transaction with a verified token; raises TF409 FENCE_STALE when the lease has passed to a newer holder.';

-- Trigger function that refuses a write to a fenced table in a transaction
-- that has not called tenure_fence for the table's lease (SQLSTATE TF428),
-- so a write path that forgot the fence fails instead of writing unfenced.
--
-- One lease guards the whole table:
--   CREATE TRIGGER orders_fenced BEFORE INSERT OR UPDATE OR DELETE ON orders
--       FOR EACH ROW EXECUTE FUNCTION tenure_fenced('orders');
--   CREATE TRIGGER orders_fenced_truncate BEFORE TRUNCATE ON orders
--       FOR EACH STATEMENT EXECUTE FUNCTION tenure_fenced('orders');
-- Each row names its lease in a column (an UPDATE that moves a row to
-- another lease needs both fenced):
--   CREATE TRIGGER accounts_fenced BEFORE INSERT OR UPDATE OR DELETE ON accounts
--       FOR EACH ROW EXECUTE FUNCTION tenure_fenced('column', 'lease_name');
-- (PostgreSQL 11 spells it EXECUTE PROCEDURE.)
CREATE OR REPLACE FUNCTION tenure_fenced()
    RETURNS trigger
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $fn$
DECLARE
    by_column boolean;
    leases    text[] := '{}';
    lease     text;
    have      text;
BEGIN
    by_column := TG_NARGS = 2 AND TG_ARGV[0] = 'column';
    IF NOT (TG_NARGS = 1 OR by_column) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('tenure_fenced on %I.%I: takes one lease name, or ''column'' and a column name; got %s arguments',
                             TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_NARGS);
    END IF;

    IF NOT by_column THEN
        leases := ARRAY[TG_ARGV[0]];
    ELSIF TG_LEVEL <> 'ROW' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('tenure_fenced(''column'', ...) on %I.%I: needs a FOR EACH ROW trigger; fence TRUNCATE with a lease name',
                             TG_TABLE_SCHEMA, TG_TABLE_NAME);
    ELSE
        IF TG_OP IN ('INSERT', 'UPDATE') THEN
            IF NOT to_jsonb(NEW) ? TG_ARGV[1] THEN
                RAISE EXCEPTION USING
                    ERRCODE = 'invalid_parameter_value',
                    MESSAGE = format('tenure_fenced on %I.%I: the table has no column %I', TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[1]);
            END IF;
            leases := leases || (to_jsonb(NEW) ->> TG_ARGV[1]);
        END IF;
        IF TG_OP IN ('UPDATE', 'DELETE') THEN
            IF NOT to_jsonb(OLD) ? TG_ARGV[1] THEN
                RAISE EXCEPTION USING
                    ERRCODE = 'invalid_parameter_value',
                    MESSAGE = format('tenure_fenced on %I.%I: the table has no column %I', TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[1]);
            END IF;
            leases := leases || (to_jsonb(OLD) ->> TG_ARGV[1]);
        END IF;
    END IF;

    FOREACH lease IN ARRAY leases LOOP
        IF lease IS NULL THEN
            RAISE EXCEPTION USING
                ERRCODE = 'TF428',
                MESSAGE = format('FENCE_MISSING: %s on %I.%I names no lease: column %I is NULL',
                                 TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[1]);
        END IF;
        IF tenure_fence_token(lease) IS NULL THEN
            SELECT string_agg(to_json(k)::text, ', ' ORDER BY k) INTO have
                FROM jsonb_object_keys(coalesce(nullif(current_setting('tenure.fence', true), '')::jsonb, '{}'::jsonb)) AS k;
            RAISE EXCEPTION USING
                ERRCODE = 'TF428',
                MESSAGE = format('FENCE_MISSING: %s on %I.%I is not fenced for lease %s: call tenure_fence(%L, <token>) first in this transaction',
                                 TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME, to_json(lease)::text, lease),
                DETAIL = CASE WHEN have IS NULL THEN 'This transaction is fenced for no lease.'
                              ELSE format('This transaction is fenced for: %s.', have) END;
        END IF;
    END LOOP;

    IF TG_LEVEL = 'STATEMENT' THEN
        RETURN NULL;
    ELSIF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END
$fn$;

COMMENT ON FUNCTION tenure_fenced() IS
    'Tenure fencing: trigger refusing writes (TF428 FENCE_MISSING) in transactions not fenced for the table''s lease. Arguments: a lease name, or ''column'' and a column name.';

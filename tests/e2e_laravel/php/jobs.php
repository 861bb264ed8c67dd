<?php
// Jobs shaped as `php artisan make:job` makes them, for the interop tests.
namespace App\Jobs;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldBeEncrypted;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;
use Illuminate\Queue\SerializesModels;

class User extends \Illuminate\Database\Eloquent\Model
{
    protected $table = 'users';
    public $timestamps = false;
}

enum Status: string { case Paid = 'paid'; case Open = 'open'; }

class SendInvoice implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public $tries = 3;
    public $backoff = [1, 5, 10];
    public $timeout = 120;
    public $maxExceptions = 2;
    public $failOnTimeout = true;

    public function __construct(
        public int $invoiceId,
        public string $customer,
        public float $amount,
        public array $lines,
        protected ?string $note = null,
        private bool $urgent = false,
    ) {}

    public function handle() { record_run($this); }
}

class ResizeImage implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public function __construct(public string $path, public $when, public $status, public $statuses) {}

    public function retryUntil() { return \Carbon\Carbon::createFromTimestamp(2000000000); }

    public function handle() { record_run($this); }
}

class SyncUser implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    // What SerializesModels leaves in place of an Eloquent model.
    public function __construct(public $user, public \Carbon\CarbonImmutable $since) {}

    public function handle() { record_run($this); }
}

class Secret implements ShouldQueue, ShouldBeEncrypted
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public function __construct(public string $token) {}

    public function handle() { record_run($this); }
}

function job_cases(): array
{
    $when = \Carbon\Carbon::create(2024, 5, 6, 7, 8, 9.123456, 'Europe/Paris');
    return [
        'invoice' => (new SendInvoice(7, "Zoë / \"Ünïcode\" \u{2028}", 19.99,
            [['sku' => 'A-1', 'qty' => 2, 'price' => 9.5], ['sku' => 'B/2', 'qty' => 1, 'price' => 0.1]],
            'pay soon', true))->onQueue('high'),
        'delayed' => (new SendInvoice(8, 'Bob', 3.0, []))->delay(60)->onConnection('database'),
        'dates_and_enums' => (new ResizeImage('/img/a.png', $when, Status::Paid,
            [Status::Open, Status::Open, Status::Paid])),
        'chained' => (new SendInvoice(9, 'Chain', 1.0, []))->chain([
            new ResizeImage('/img/b.png', null, Status::Open, []),
            new SendInvoice(10, 'Next', 2.0, []),
        ]),
        'encrypted' => new Secret('s3cr3t'),
        'model' => new SyncUser(
            new \Illuminate\Contracts\Database\ModelIdentifier('App\Jobs\User', 42, ['posts', 'roles'], 'sqlite'),
            \Carbon\CarbonImmutable::create(2025, 1, 2, 3, 4, 5, 'UTC'),
        ),
    ];
}

// ---------------------------------------------------------------------------------------------
// For queue_harness.php (Laravel's real Worker): every handle() above and below appends one JSON
// line to the file named by $QUEUE_HARNESS_LOG (see record_run()).

/** JSON-ready form of a property value: dates as "Class Y-m-d H:i:s.u e", enums as
 *  {"enum": Class, "value": v}, models as {"model": Class, "attributes": …}, arrays recursively. */
function harness_value($v)
{
    if ($v instanceof \DateTimeInterface) {
        return get_class($v) . ' ' . $v->format('Y-m-d H:i:s.u e');
    }
    if ($v instanceof \BackedEnum) {
        return ['enum' => get_class($v), 'value' => $v->value];
    }
    if ($v instanceof \UnitEnum) {
        return ['enum' => get_class($v), 'name' => $v->name];
    }
    if ($v instanceof \Illuminate\Database\Eloquent\Model) {
        return ['model' => get_class($v), 'attributes' => $v->getAttributes()];
    }
    if (is_array($v)) {
        return array_map(__NAMESPACE__ . '\harness_value', $v);
    }
    if (is_object($v)) {
        return ['object' => get_class($v), 'props' => job_props($v, [])];
    }
    return $v;
}

/** What Queueable / InteractsWithQueue add to every job: left out of the logged props. */
const QUEUE_PLUMBING = ['job', 'connection', 'queue', 'chainConnection', 'chainQueue',
    'chainCatchCallbacks', 'delay', 'afterCommit', 'middleware', 'chained'];

/** Every property (public, protected, private) by plain name, in PHP's order. */
function job_props(object $o, array $skip = QUEUE_PLUMBING): array
{
    $props = [];
    foreach ((new \ReflectionObject($o))->getProperties() as $p) {
        if ($p->isStatic() || in_array($p->getName(), $skip, true)) {
            continue;
        }
        $p->setAccessible(true);
        if (! $p->isInitialized($o)) {
            continue;
        }
        $props[$p->getName()] = harness_value($p->getValue($o));
    }
    return $props;
}

const HARNESS_JSON = JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_PRESERVE_ZERO_FRACTION
    | JSON_THROW_ON_ERROR;

/** Append one JSON line about this run of $job to $QUEUE_HARNESS_LOG (if set). */
function record_run(object $job): void
{
    $path = getenv('QUEUE_HARNESS_LOG');
    if (! $path) {
        return;
    }
    $queued = $job->job ?? null;
    $line = json_encode([
        'runner' => 'php',
        'class' => get_class($job),
        'props' => (object) job_props($job),
        'attempts' => $job->attempts(),
        'queue' => $queued?->getQueue(),
        'uuid' => $queued?->uuid(),
        'job_id' => $queued?->getJobId(),
        'pid' => getmypid(),
        'ran_at' => microtime(true),
    ], HARNESS_JSON);
    file_put_contents($path, $line . "\n", FILE_APPEND | LOCK_EX);
}

class Scalars implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public function __construct(
        public int $count,
        public int $negative,
        public int $big,
        public string $name,
        public string $empty,
        public bool $yes,
        public bool $no,
        public ?string $nothing,
    ) {}

    public function handle() { record_run($this); }
}

class Unicode implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public function __construct(public string $text, public string $emoji, public string $separators) {}

    public function handle() { record_run($this); }
}

class Floats implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public function __construct(
        public float $tenth,
        public float $tiny,
        public float $huge,
        public float $whole,
        public float $negativeZero,
    ) {}

    public function handle() { record_run($this); }
}

class Nested implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public function __construct(public array $list, public array $map) {}

    public function handle() { record_run($this); }
}

class Dates implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public function __construct(
        public \Carbon\Carbon $at,
        public \Carbon\CarbonImmutable $since,
        public \Carbon\CarbonImmutable $offset,
        public ?\Carbon\Carbon $never,
    ) {}

    public function handle() { record_run($this); }
}

class Enums implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public function __construct(public Status $status, public array $statuses, public ?Status $maybe) {}

    public function handle() { record_run($this); }
}

class Promoted implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public string $plain = 'class body';

    public function __construct(
        public string $visible,
        protected string $guarded,
        private array $secret,
        private ?int $count = null,
    ) {}

    public function handle() { record_run($this); }
}

class Ping implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public function __construct(public string $label) {}

    public function handle() { record_run($this); }
}

class Tuned implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public $tries = 4;
    public $backoff = [2, 4, 8];
    public $timeout = 30;
    public $maxExceptions = 3;
    public $failOnTimeout = true;

    public function __construct(public string $label) {}

    public function retryUntil() { return \Carbon\CarbonImmutable::createFromTimestamp(4102444800); }

    public function handle() { record_run($this); }
}

class ChainStep implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public function __construct(public string $step, public int $position) {}

    public function handle() { record_run($this); }
}

class SecretWork implements ShouldQueue, ShouldBeEncrypted
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public function __construct(public string $token, public array $meta) {}

    public function handle() { record_run($this); }
}

/** Throws on every run (logs first). */
class AlwaysFails implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public function __construct(public string $message) {}

    public function handle()
    {
        record_run($this);
        throw new \RuntimeException($this->message);
    }
}

/** Throws while attempts() <= $failures, then succeeds; released at once (backoff 0). */
class Flaky implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public $tries = 3;
    public $backoff = 0;

    public function __construct(public int $failures) {}

    public function handle()
    {
        record_run($this);
        if ($this->attempts() <= $this->failures) {
            throw new \RuntimeException("flaky: attempt {$this->attempts()} of {$this->failures} failing");
        }
    }
}

/** Always throws; fails for good after maxExceptions (2) exceptions although tries is 10. */
class ExceptionLimited implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public $tries = 10;
    public $maxExceptions = 2;
    public $backoff = 0;

    public function __construct(public string $message) {}

    public function handle()
    {
        record_run($this);
        throw new \RuntimeException($this->message);
    }
}

/** Sleeps past its 1 s timeout: the daemon's SIGALRM handler fails it and kills the worker. */
class Slow implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public $timeout = 1;
    public $failOnTimeout = true;

    public function __construct(public int $seconds) {}

    public function handle()
    {
        record_run($this);
        sleep($this->seconds);
    }
}

/** Jobs that run successfully once each (the chain: three runs). */
function worker_cases(): array
{
    return [
        'scalars' => new Scalars(42, -7, PHP_INT_MAX, 'plain ascii', '', true, false, null),
        'unicode' => new Unicode(
            "Zoë Ünïcode — 日本語 \"quoted\" back\\slash /slash",
            "😀👍🏽",
            "line\u{2028}para\u{2029}tab\tnewline\n",
        ),
        'floats' => new Floats(0.1, 1e-7, 1.5e300, 2.0, -0.0),
        'nested' => new Nested(
            [1, 'two', 3.5, true, null, [4, [5, 6]], []],
            ['name' => 'x', 'inner' => ['a' => 1, 'b' => [1, 2], 'c' => ['deep' => ['deeper' => 'yes']]],
                'empty' => [], 'ключ' => 'значение'],
        ),
        'dates' => new Dates(
            \Carbon\Carbon::create(2024, 5, 6, 7, 8, 9.123456, 'Europe/Paris'),
            \Carbon\CarbonImmutable::create(2025, 1, 2, 3, 4, 5, 'UTC'),
            \Carbon\CarbonImmutable::create(2023, 12, 31, 23, 59, 59, '+05:30'),
            null,
        ),
        'enums' => new Enums(Status::Paid, [Status::Open, Status::Paid, Status::Open], null),
        'promoted' => new Promoted('shown', 'protected value', ['k' => 'v', 'n' => 1], 3),
        'delayed_2s' => (new Ping('after 2 s'))->delay(2),
        'named_queue' => (new Ping('on emails'))->onQueue('emails'),
        'tuned' => new Tuned('knobs'),
        'chain' => (new ChainStep('first', 1))->chain([
            new ChainStep('second', 2),
            (new ChainStep('third', 3))->onQueue('emails'),
        ]),
        'secret' => new SecretWork('t0k3n', ['scope' => 'billing']),
    ];
}

/** Jobs that throw (for failed_jobs / retry / maxExceptions / timeout tests). */
function failing_cases(): array
{
    return [
        'always_fails' => new AlwaysFails('boom on purpose'),
        'always_fails_emails' => (new AlwaysFails('boom on emails'))->onQueue('emails'),
        'flaky' => new Flaky(2),
        'max_exceptions' => new ExceptionLimited('limited'),
        'timeout' => new Slow(10),
    ];
}

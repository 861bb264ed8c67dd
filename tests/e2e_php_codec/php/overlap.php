<?php
// Laravel's WithoutOverlapping lock key, as real PHP builds it: for each input row
// {"key": …, "prefix": …|null, "share": bool, "release": bool}, a job dispatched
// ->through([new WithoutOverlapping(key)]) serialized as Queue::createPayload does
// (serialize(clone $job)), and the lock key the middleware's getLockKey makes.
namespace App\Jobs;

require __DIR__ . '/bootstrap.php';

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;
use Illuminate\Queue\Middleware\WithoutOverlapping;
use Illuminate\Queue\SerializesModels;

class SyncAccount implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public $accountId;

    public function __construct($accountId)
    {
        $this->accountId = $accountId;
    }

    public function handle(): void
    {
    }
}

while (($line = fgets(STDIN)) !== false) {
    $row = json_decode($line, true, 512, JSON_THROW_ON_ERROR);
    $middleware = new WithoutOverlapping($row['key']);
    if ($row['prefix'] !== null) {
        $middleware->withPrefix($row['prefix']);
    }
    if ($row['share'] && method_exists($middleware, 'shared')) {
        $middleware->shared();
    }
    if ($row['release']) {
        $middleware->releaseAfter(10)->expireAfter(180);
    }
    $job = (new SyncAccount($row['key']))->through([$middleware]);
    \emit([
        'command' => base64_encode(serialize(clone $job)),
        'lock_key' => $middleware->getLockKey($job),
    ]);
}
